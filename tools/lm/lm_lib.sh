# Shared by lm_parity.sh and lm_dcp_resume.sh: the PyTorch peer's torch
# (peer.sh: LIBTORCH_PYTHON, LIBTORCH_TORCHRUN, ...), torchrun on a free port,
# torchrun's line prefixes stripped, and the model flags in each side's
# spelling.
# Usage: source lm_lib.sh PEER_SH LOG_DIR
# shellcheck source=/dev/null
source "$1"
lm_log_dir=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
# 0 when the peer's torch has DTensor tensor parallelism; else says SKIP.
peer_has_dtensor() {
  "$LIBTORCH_PYTHON" -c 'import torch.distributed.tensor.parallel, torch.distributed.checkpoint' 2>/dev/null && return 0
  echo "SKIP: the PyTorch peer ($LIBTORCH_PYTHON, torch $LIBTORCH_VERSION) has no DTensor tensor parallelism (torch.distributed.tensor.parallel, PyTorch >= 2.x); run on the torch 2.x leg (--config=torch2)"
  return 1
}
free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# run_torchrun N ARGS...: N processes on one node.
run_torchrun() {
  local n=$1
  shift
  "$LIBTORCH_TORCHRUN" --nnodes=1 --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$(free_port)" \
    --rdzv_id="lm$RANDOM" --nproc_per_node="$n" $LIBTORCH_TORCHRUN_FLAGS --log_dir="$lm_log_dir" "$@"
}
# run_peer N ARGS...: the PyTorch peer under run_torchrun; prints its log.
# A job one of whose processes torch itself killed by a signal (seen once in
# CI: torch 2.15 at the peer's exit, after its last line, "terminate called
# without an active exception", SIGABRT; the same as tests/interop/dcp_lib.sh
# meets in dcp.save) runs once more, with a WARNING and the first log on
# stderr; a second such death, or any other failure, is the outcome (its exit
# status).
run_peer() {
  local log attempt rc
  for attempt in 1 2; do
    rc=0
    log=$(run_torchrun "$@" 2>&1) || rc=$?
    [ "$rc" = 0 ] && { printf '%s\n' "$log"; return 0; }
    if [ "$attempt" = 1 ] && grep -Eq 'exitcode *: -[0-9]+ ' <<<"$log"; then
      echo "WARNING: a process of the PyTorch peer died by a signal; running it once more. Its log:" >&2
      printf '%s\n' "$log" >&2
      continue
    fi
    printf '%s\n' "$log"
    return "$rc"
  done
}
strip() { sed 's/^\[default[0-9]*\]://'; }
mesh_size() { echo $((${1%x*} * ${1#*x})); }
# model_flags FLAG...: sets the arrays ours (train's --lm_* spelling) and peer.
model_flags() {
  ours=(); peer=()
  local f
  for f in "$@"; do
    case $f in
      --dim=*) ours+=("--lm_dim=${f#*=}") ;; --heads=*) ours+=("--lm_heads=${f#*=}") ;;
      --layers=*) ours+=("--lm_layers=${f#*=}") ;; --context=*) ours+=("--lm_context=${f#*=}") ;;
      --mlp=*) ours+=("--lm_mlp=${f#*=}") ;; --batch=*|--lr=*) ours+=("$f") ;;
      *) fail "unknown model flag $f" ;;
    esac
    peer+=("$f")
  done
}
# losses_of PREFIX TEXT: "STEP LOSS" lines of "PREFIX step K loss L" lines.
losses_of() { strip <<<"$2" | sed -n "s/^$1 step \\([0-9]*\\) loss \\([0-9.]*\\)\\( .*\\)\\{0,1\\}\$/\\1 \\2/p"; }
