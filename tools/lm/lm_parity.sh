#!/usr/bin/env bash
# Parity of shardlight's LM job with PyTorch 2.x DTensor tensor parallelism
# (lm_peer.py): both train the same GPT on the same DP x TP mesh from the same
# initial weights -- shardlight saves them (--save_at=0) and `ckpt export`
# writes the torch.save file the peer loads -- on the same batches, and the
# per-step losses are compared: step 1 within STEP1_TOL relative, every step
# within CURVE_TOL. Also reports tokens/s of both (same threads per rank).
#
# Usage: lm_parity.sh TRAIN_BIN CKPT_BIN PEER_SH MESH STEPS [OUT_DIR] [-- MODEL FLAGS]
#   MODEL FLAGS: --dim=N --heads=N --layers=N --context=N --mlp=N --batch=N
#   (passed to both sides). Env: STEP1_TOL (1e-5), CURVE_TOL (1e-3), THREADS (1).
# Writes OUT_DIR/losses.csv (step,shardlight,pytorch). Exit 0 when within
# tolerance, 1 otherwise; "SKIP: ..." and 0 when the peer torch has no DTensor.
set -u
train_bin=$(realpath "$1"); ckpt_bin=$(realpath "$2"); peer_sh=$3; mesh=$4; steps=$5
shift 5
out=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then out=$1; shift; fi
[ -n "$out" ] || out=$(mktemp -d "${TEST_TMPDIR:-/tmp}/lm_parity.XXXXXX")
[ "${1:-}" = "--" ] && shift
model=("$@")
here=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
# shellcheck source=/dev/null
source "$peer_sh"
step1_tol=${STEP1_TOL:-1e-5}; curve_tol=${CURVE_TOL:-1e-3}; threads=${THREADS:-1}
fail() { echo "FAIL: $*" >&2; exit 1; }

if ! "$LIBTORCH_PYTHON" -c 'import torch.distributed.tensor.parallel' 2>/dev/null; then
  echo "SKIP: the PyTorch peer ($LIBTORCH_PYTHON, torch $LIBTORCH_VERSION) has no DTensor tensor parallelism (torch.distributed.tensor.parallel, PyTorch >= 2.x); run on the torch 2.x leg (--config=torch2)"
  exit 0
fi
mkdir -p "$out"
dp=${mesh%x*}; tp=${mesh#*x}; n=$((dp * tp))
port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
run_torchrun() { "$LIBTORCH_TORCHRUN" --nnodes=1 --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$(port)" \
  --rdzv_id="lm$RANDOM" --nproc_per_node="$n" $LIBTORCH_TORCHRUN_FLAGS --log_dir="$out/logs" "$@"; }

# The model flags in each side's spelling.
ours=(); peer=()
for f in "${model[@]}"; do
  case $f in
    --dim=*) ours+=("--lm_dim=${f#*=}") ;; --heads=*) ours+=("--lm_heads=${f#*=}") ;;
    --layers=*) ours+=("--lm_layers=${f#*=}") ;; --context=*) ours+=("--lm_context=${f#*=}") ;;
    --mlp=*) ours+=("--lm_mlp=${f#*=}") ;; --batch=*|--lr=*) ours+=("$f") ;;
    *) fail "unknown model flag $f" ;;
  esac
  peer+=("$f")
done

rm -rf "$out/ckpt"
sl=$(run_torchrun --no_python "$train_bin" --job=lm --mesh="$mesh" --steps="$steps" --log_every=1 --save_at=0 \
  --checkpoint_dir="$out/ckpt" --threads="$threads" "${ours[@]}" 2>&1) || fail "shardlight exited $?: $sl"
"$ckpt_bin" export --prefix=model. "$out/ckpt" "$out/init.pt" >/dev/null || fail "ckpt export failed"
py=$(OMP_NUM_THREADS=$threads run_torchrun "$here/lm_peer.py" --mesh="$mesh" --weights="$out/init.pt" --steps="$steps" \
  --threads="$threads" "${peer[@]}" 2>&1) || fail "the PyTorch peer exited $?: $py"

strip() { sed 's/^\[default[0-9]*\]://'; }
sed -n 's/^lm: step \([0-9]*\) loss \([0-9.]*\) .*/\1 \2/p' < <(strip <<<"$sl") >"$out/ours.txt"
sed -n 's/^peer: step \([0-9]*\) loss \([0-9.]*\)$/\1 \2/p' < <(strip <<<"$py") >"$out/peer.txt"
[ "$(wc -l <"$out/ours.txt")" -eq "$steps" ] || fail "shardlight printed $(wc -l <"$out/ours.txt") losses: $sl"
[ "$(wc -l <"$out/peer.txt")" -eq "$steps" ] || fail "the peer printed $(wc -l <"$out/peer.txt") losses: $py"
echo "step,shardlight,pytorch" >"$out/losses.csv"
join "$out/ours.txt" "$out/peer.txt" | tr ' ' ',' >>"$out/losses.csv"
ours_tps=$(strip <<<"$sl" | sed -n 's/^train: rank 0\/.* tokens_per_s \([0-9.]*\) .*/\1/p')
peer_tps=$(strip <<<"$py" | sed -n 's/^peer: tokens_per_s \([0-9.]*\) .*/\1/p')
ours_rss=$(strip <<<"$sl" | sed -n 's/^train: rank 0\/.* peak_rss_bytes \([0-9]*\).*/\1/p')
peer_rss=$(strip <<<"$py" | sed -n 's/^peer: rank 0 peak_rss_bytes \([0-9]*\).*/\1/p')
state=$(strip <<<"$sl" | sed -n 's/^train: rank 0\/.* state_bytes \([0-9]*\) .*/\1/p')
echo "mesh $mesh, $steps steps, $threads thread(s) per rank"
awk -F, -v s1="$step1_tol" -v ct="$curve_tol" 'NR > 1 {
    d = ($2 - $3) / $3; if (d < 0) d = -d
    if (d > worst) { worst = d; at = $1 }
    if ($1 == 1) { first = d; if (d > s1) bad = 1 }
    if (d > ct) bad = 1
    if (NR <= 6 || NR % 10 == 1) printf "  step %3d shardlight %.9f pytorch %.9f rel %.2e\n", $1, $2, $3, d
  }
  END { printf "step-1 relative difference %.2e (tolerance %s); largest %.2e at step %d (tolerance %s)\n", first, s1, worst, at, ct
        exit bad }' "$out/losses.csv"
ok=$?
echo "tokens/s: shardlight $ours_tps, pytorch $peer_tps (ratio $(awk -v a="$ours_tps" -v b="$peer_tps" 'BEGIN {printf "%.2f", a / b}'))"
echo "rank 0: parameters + AdamW moments $state bytes; peak RSS shardlight $ours_rss, pytorch $peer_rss bytes"
[ $ok -eq 0 ] || fail "losses differ beyond tolerance (see $out/losses.csv)"
echo "PASS"
