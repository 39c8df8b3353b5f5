#!/usr/bin/env bash
# Parity of shardlight's LM job with PyTorch 2.x DTensor tensor parallelism
# (lm_peer.py): both train the same GPT on the same DP x TP mesh from the same
# initial weights -- shardlight saves them (--save_at=0) and `ckpt export`
# writes the torch.save file the peer loads -- on the same batches, and the
# per-step losses are compared: step 1 within STEP1_TOL relative, every step
# within CURVE_TOL. Also reports tokens/s of both (same threads per rank).
# Each dtype of DTYPES is one such pair of runs (float64: both sides compute
# in float64 from the float32 initial weights, widened).
#
# With --strategy=fsdp (MESH Nx1): shardlight's --strategy=fsdp against the
# peer's --fsdp (FSDP2 fully_shard per block + root), same comparison.
# With --strategy=hsdp (MESH RxS: replicate x shard): shardlight's
# --strategy=hsdp against the peer's --hsdp (fully_shard on the 2-d mesh
# init_device_mesh((R, S), mesh_dim_names=("replicate", "shard"))).
# With --strategy=fsdp_tp (MESH DPxTP): shardlight's --strategy=fsdp_tp
# against the peer's --fsdp_tp (parallelize_module on the "tp" dim, then
# fully_shard per block + root on the "dp" dim).
#
# Usage: lm_parity.sh TRAIN_BIN CKPT_BIN PEER_SH MESH STEPS [OUT_DIR] [-- MODEL FLAGS]
#   MODEL FLAGS: --dim=N --heads=N --layers=N --context=N --mlp=N --batch=N,
#   and the optimizer: --optimizer=adamw|sgd --lr=X --momentum=X
#   --weight_decay=X (passed to both sides: --lm_optimizer, ... on ours);
#   --dtypes=A,B and --grads=N set DTYPES and GRADS; --steps=N replaces
#   STEPS (a test's longer run: bazel test --test_arg=--steps=50 ...);
#   --strategy=model_parallel|fsdp|hsdp|fsdp_tp (default model_parallel: DTensor TP peer);
#   --param_dtype=D --reduce_dtype=D (with --strategy=fsdp: both sides' FSDP2
#   MixedPrecisionPolicy, e.g. bfloat16 and float32; the DTYPES are the shards');
#   --tol=DTYPE:X (repeatable) makes X both tolerances of DTYPE. Env: STEP1_TOL (1e-5), CURVE_TOL (1e-3), THREADS (1),
#   DTYPES ("float32"; e.g. "float32 float64"), CURVE_DTYPES (the dtypes whose
#   curve must be within CURVE_TOL; default: all of DTYPES -- the others' largest
#   difference is reported, and only their step 1 checked), GRADS (0; N: also
#   print per-parameter gradient differences of steps 1..N, grad_diff.py).
# Writes OUT_DIR/losses.csv (step,shardlight,pytorch: the first dtype's) and
# OUT_DIR/<dtype>/losses.csv. Exit 0 when within tolerance, 1 otherwise;
# "SKIP: ..." and 0 when the peer torch has no DTensor.
set -u
train_bin=$(realpath "$1"); ckpt_bin=$(realpath "$2"); peer_sh=$3; mesh=$4; steps=$5
shift 5
out=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then out=$1; shift; fi
[ -n "$out" ] || out=$(mktemp -d "${TEST_TMPDIR:-/tmp}/lm_parity.XXXXXX")
[ "${1:-}" = "--" ] && shift
model=(); strategy=model_parallel; policy=(); declare -A tols=()
for f in "$@"; do  # --dtypes=A,B and --grads=N: as DTYPES and GRADS
  case $f in
    --dtypes=*) DTYPES=${f#*=}; DTYPES=${DTYPES//,/ } ;; --grads=*) GRADS=${f#*=} ;;
    --steps=*) steps=${f#*=} ;;
    --strategy=*) strategy=${f#*=} ;; --tol=*:*) f=${f#*=}; tols[${f%%:*}]=${f#*:} ;;
    --param_dtype=*|--reduce_dtype=*) policy+=("$f") ;;
    *) model+=("$f") ;;
  esac
done
here=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
source "$here/lm_lib.sh" "$peer_sh" "$out/logs"
step1_tol=${STEP1_TOL:-1e-5}; curve_tol=${CURVE_TOL:-1e-3}; threads=${THREADS:-1}
dtypes=${DTYPES:-float32}; curve_dtypes=${CURVE_DTYPES:-$dtypes}; grads=${GRADS:-0}
case $strategy in
  model_parallel) peer_has_dtensor || exit 0; peer_strategy=() ;;
  fsdp) peer_has_fully_shard || exit 0; peer_strategy=(--fsdp) ;;
  hsdp) peer_has_fully_shard || exit 0; peer_strategy=(--hsdp) ;;
  fsdp_tp) peer_has_fully_shard || exit 0; peer_strategy=(--fsdp_tp) ;;
  *) fail "--strategy=$strategy is not model_parallel, fsdp, hsdp or fsdp_tp" ;;
esac
[ ${#policy[@]} -eq 0 ] || [ "$strategy" = fsdp ] || [ "$strategy" = hsdp ] \
  || fail "--param_dtype and --reduce_dtype need --strategy=fsdp or hsdp"
mkdir -p "$out"
n=$(mesh_size "$mesh")
model_flags "${model[@]}"

status=0
# pair DTYPE: both runs in DTYPE under $out/DTYPE, compared; 1 when out of tolerance.
pair() {
  local dtype=$1 dir=$out/$1 ct=$curve_tol s1=$step1_tol
  grep -qw -- "$dtype" <<<"$curve_dtypes" || ct=inf
  [ -n "${tols[$dtype]:-}" ] && { ct=${tols[$dtype]}; s1=${tols[$dtype]}; }
  rm -rf "$dir"; mkdir -p "$dir/grads"
  local sl py
  sl=$(run_torchrun "$n" --no_python "$train_bin" --job=lm --mesh="$mesh" --steps="$steps" --log_every=1 --save_at=0 \
    --checkpoint_dir="$dir/ckpt" --threads="$threads" --lm_dtype="$dtype" --lm_grads_dir="$dir/grads" \
    --lm_grads_steps="$grads" --strategy="$strategy" "${ours[@]}" "${policy[@]}" 2>&1) \
    || fail "shardlight exited $?: $sl"
  "$ckpt_bin" export --prefix=model. "$dir/ckpt" "$dir/init.pt" >/dev/null || fail "ckpt export failed"
  py=$(OMP_NUM_THREADS=$threads run_peer "$n" "$here/lm_peer.py" --mesh="$mesh" --weights="$dir/init.pt" --steps="$steps" \
    --threads="$threads" --dtype="$dtype" --grads_dir="$dir/grads" --grads_steps="$grads" "${peer_strategy[@]}" "${peer[@]}" \
    "${policy[@]}") \
    || fail "the PyTorch peer exited $?: $py"
  losses_of lm: "$sl" >"$dir/ours.txt"
  losses_of peer: "$py" >"$dir/peer.txt"
  [ "$(wc -l <"$dir/ours.txt")" -eq "$steps" ] || fail "shardlight printed $(wc -l <"$dir/ours.txt") losses: $sl"
  [ "$(wc -l <"$dir/peer.txt")" -eq "$steps" ] || fail "the peer printed $(wc -l <"$dir/peer.txt") losses: $py"
  echo "step,shardlight,pytorch" >"$dir/losses.csv"
  join "$dir/ours.txt" "$dir/peer.txt" | tr ' ' ',' >>"$dir/losses.csv"
  [ -f "$out/losses.csv" ] || cp "$dir/losses.csv" "$out/losses.csv"
  local ours_tps peer_tps ours_rss peer_rss state ok
  ours_tps=$(strip <<<"$sl" | sed -n 's/^train: rank 0\/.* tokens_per_s \([0-9.]*\) .*/\1/p')
  peer_tps=$(strip <<<"$py" | sed -n 's/^peer: tokens_per_s \([0-9.]*\) .*/\1/p')
  ours_rss=$(strip <<<"$sl" | sed -n 's/^train: rank 0\/.* peak_rss_bytes \([0-9]*\).*/\1/p')
  peer_rss=$(strip <<<"$py" | sed -n 's/^peer: rank 0 peak_rss_bytes \([0-9]*\).*/\1/p')
  state=$(strip <<<"$sl" | sed -n 's/^train: rank 0\/.* state_bytes \([0-9]*\) .*/\1/p')
  echo "mesh $mesh, $strategy, $dtype${policy[*]:+ (${policy[*]})}, $steps steps, $threads thread(s) per rank"
  for ((k = 1; k <= grads; k++)); do
    "$ckpt_bin" export --prefix=grad. "$dir/grads/step$k" "$dir/grads/ours_step$k.pt" >/dev/null \
      || fail "ckpt export of the step-$k gradients failed"
    echo "gradients of step $k (after the DP sum, before clipping): shardlight vs pytorch"
    "$LIBTORCH_PYTHON" "$here/grad_diff.py" "$dir/grads/ours_step$k.pt" "$dir/grads/peer_step$k.pt" | sed 's/^/  /' \
      || fail "the step-$k gradients do not match in keys or shapes"
  done
  awk -F, -v s1="$s1" -v ct="$ct" -v dt="$dtype" 'NR > 1 {
      d = ($2 - $3) / $3; if (d < 0) d = -d
      if (d > worst) { worst = d; at = $1 }
      if ($1 == 1) { first = d; if (d > s1) bad = 1 }
      if (d > 1e-3) over++
      if (ct != "inf" && d > ct) bad = 1
      if (NR <= 6 || NR % 10 == 1) printf "  step %3d shardlight %.12f pytorch %.12f rel %.2e\n", $1, $2, $3, d
    }
    END { printf "%s: step-1 relative difference %.2e (tolerance %s); largest %.2e at step %d (tolerance %s); %d of %d steps beyond 1e-3\n",
                 dt, first, s1, worst, at, ct == "inf" ? "none, reported" : ct, over, NR - 1
          exit bad }' "$dir/losses.csv"
  ok=$?
  echo "tokens/s: shardlight $ours_tps, pytorch $peer_tps (ratio $(awk -v a="$ours_tps" -v b="$peer_tps" 'BEGIN {printf "%.2f", a / b}'))"
  echo "rank 0: parameters + optimizer state $state bytes; peak RSS shardlight $ours_rss, pytorch $peer_rss bytes"
  [ $ok -eq 0 ] || { echo "FAIL: $dtype losses differ beyond tolerance (see $dir/losses.csv)" >&2; return 1; }
}
rm -f "$out/losses.csv"
for dtype in $dtypes; do
  case $dtype in float32|float64) ;; *) fail "DTYPES: $dtype is not float32 or float64" ;; esac
  pair "$dtype" || status=1
done
[ $status -eq 0 ] || exit 1
echo "PASS"
