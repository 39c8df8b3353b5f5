#!/usr/bin/env bash
# The same figures on both LibTorch builds: process_bench (thread-ranks) built
# -c opt against Debian's 1.13 and against the pinned torch 2.x
# (--config=torch2), run alternately ROUNDS times so that machine noise hits
# both, the best of each figure kept. Prints both and the 2.x / 1.13 ratio for
# step time, FullTensor, checkpoint save and load (a regression from the port
# shows as a ratio above 1), with the raw Gloo allgather as the in-run baseline.
# Usage: bash tools/bench/libtorch_compare.sh [ROUNDS] [-- process_bench flags]
# (COMPILATION_MODE=fastbuild reuses the test builds instead of building -c opt.)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
shift || true
[ "${1:-}" = "--" ] && shift
bin=$(mktemp -d /var/tmp/shardlight-libtorch-compare.XXXXXX)
trap 'rm -rf "$bin"' EXIT
for leg in 113 torch2; do
  flags=(-c "${COMPILATION_MODE:-opt}")
  [ $leg = torch2 ] && flags+=(--config=torch2)
  bazel build "${flags[@]}" //tools/bench:process_bench >/dev/null 2>&1 ||
    { echo "libtorch_compare: build failed for $leg: bazel build ${flags[*]} //tools/bench:process_bench" >&2; exit 1; }
  cp bazel-bin/tools/bench/process_bench "$bin/process_bench.$leg"
done

declare -A best
keys=(step_ms full_tensor_ms raw_allgather_ms save_ms load_ms)
for ((r = 1; r <= rounds; r++)); do
  for leg in 113 torch2; do
    line=$("$bin/process_bench.$leg" --mode=threads --dir="$bin/ckpt.$leg" "$@" | grep '^threads')
    echo "round $r $leg: $line"
    for k in "${keys[@]}"; do
      v=$(grep -o "$k [0-9.]*" <<<"$line" | awk '{print $2}')
      cur=${best[$leg.$k]:-}
      if [ -z "$cur" ] || awk -v a="$v" -v b="$cur" 'BEGIN{exit !(a < b)}'; then best[$leg.$k]=$v; fi
    done
  done
done
printf '\n%-18s %12s %12s %10s\n' figure "1.13 (ms)" "2.x (ms)" "2.x/1.13"
for k in "${keys[@]}"; do
  a=${best[113.$k]} b=${best[torch2.$k]}
  printf '%-18s %12s %12s %10s\n' "$k" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2f", b / a}')"
done
