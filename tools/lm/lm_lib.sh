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
# 0 when the peer's torch has FSDP2 (torch.distributed.fsdp.fully_shard) and
# peer_has_dtensor's modules (one Python start: each costs ~3 s of CPU here); else says SKIP.
peer_has_fully_shard() {
  "$LIBTORCH_PYTHON" -c 'import torch.distributed.tensor.parallel, torch.distributed.checkpoint
from torch.distributed.fsdp import fully_shard, FSDPModule' 2>/dev/null && return 0
  echo "SKIP: the PyTorch peer ($LIBTORCH_PYTHON, torch $LIBTORCH_VERSION) has no FSDP2 (torch.distributed.fsdp.fully_shard, PyTorch >= 2.6); run on the torch 2.x leg (--config=torch2)"
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
# run_peer N ARGS...: the PyTorch peer under run_torchrun (a new port on a
# rerun), under peer.sh's torchrun_once_more: a job whose process torch itself
# killed by a signal runs once more. Prints its log; returns its status.
run_peer() { torchrun_once_more "$lm_log_dir.peer.log" run_torchrun "$@"; }
strip() { sed 's/^\[default[0-9]*\]://'; }
mesh_size() { echo $((${1%x*} * ${1#*x})); }
# model_flags FLAG...: sets the arrays ours (train's --lm_* spelling) and peer
# (the model's sizes, the batch and the optimizer: --optimizer, --lr,
# --momentum, --weight_decay).
model_flags() {
  ours=(); peer=()
  local f
  for f in "$@"; do
    case $f in
      --dim=*) ours+=("--lm_dim=${f#*=}") ;; --heads=*) ours+=("--lm_heads=${f#*=}") ;;
      --layers=*) ours+=("--lm_layers=${f#*=}") ;; --context=*) ours+=("--lm_context=${f#*=}") ;;
      --mlp=*) ours+=("--lm_mlp=${f#*=}") ;; --batch=*|--lr=*) ours+=("$f") ;;
      --optimizer=*) ours+=("--lm_optimizer=${f#*=}") ;; --momentum=*) ours+=("--lm_momentum=${f#*=}") ;;
      --weight_decay=*) ours+=("--lm_weight_decay=${f#*=}") ;;
      *) fail "unknown model flag $f" ;;
    esac
    peer+=("$f")
  done
}
# losses_of PREFIX TEXT: "STEP LOSS" lines of "PREFIX step K loss L" lines.
losses_of() { strip <<<"$2" | sed -n "s/^$1 step \\([0-9]*\\) loss \\([0-9.]*\\)\\( .*\\)\\{0,1\\}\$/\\1 \\2/p"; }
