#!/usr/bin/env bash
# Speed of shardlight's LM job beside the PyTorch DTensor peer, same mesh,
# same threads per rank, same run: lm_parity.sh at each mesh, one table.
# Usage: lm_bench.sh TRAIN_BIN CKPT_BIN PEER_SH [STEPS] [MESHES...]
#   defaults: 20 steps; meshes 1x1 1x2 2x2 1x4. Env THREADS (1).
set -u
train=$1; ckpt=$2; peer=$3; steps=${4:-20}
shift 4 2>/dev/null || shift $#
meshes=("$@"); [ ${#meshes[@]} -gt 0 ] || meshes=(1x1 1x2 2x2 1x4)
here=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
printf "%-5s %12s %12s %6s %14s %14s %14s %9s\n" mesh "sl tok/s" "pt tok/s" ratio "state B/rank" "sl RSS r0" "pt RSS r0" "max rel"
for m in "${meshes[@]}"; do
  out=$(CURVE_TOL=1 "$here/lm_parity.sh" "$train" "$ckpt" "$peer" "$m" "$steps" 2>&1) || { echo "$m: $out"; continue; }
  sl=$(sed -n 's/^tokens\/s: shardlight \([0-9.]*\), pytorch \([0-9.]*\) (ratio \([0-9.]*\))$/\1 \2 \3/p' <<<"$out")
  mem=$(sed -n 's/^rank 0: parameters + AdamW moments \([0-9]*\) bytes; peak RSS shardlight \([0-9]*\), pytorch \([0-9]*\) bytes$/\1 \2 \3/p' <<<"$out")
  worst=$(sed -n 's/.*largest \([0-9.e+-]*\) at step.*/\1/p' <<<"$out")
  # shellcheck disable=SC2086
  printf "%-5s %12s %12s %6s %14s %14s %14s %9s\n" "$m" $sl $mem "$worst"
done
