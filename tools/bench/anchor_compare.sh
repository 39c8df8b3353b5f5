#!/usr/bin/env bash
# Side by side, in one run: PyTorch 1.13's Python ShardedTensor checkpoint (the
# anchor in the project's shared/anchors) and shardlight's checkpoint, on the
# same workload: 8 float32 tensors of 4096x4096 chunked on dim 0, saved by 4
# ranks, loaded by 3 (resharding). Page cache kept, as the anchor runs.
#   bash tools/bench/anchor_compare.sh [ANCHORS_DIR]
# Needs Debian's python3-torch for the anchor (not installed by setup.sh):
#   sudo apt-get install -y python3-torch
set -euo pipefail
cd "$(dirname "$0")/../.."
anchors="${1:-../shared/anchors}"
[ -f "$anchors/pytorch_dcp_bench.py" ] || { echo "anchor_compare: no $anchors/pytorch_dcp_bench.py" >&2; exit 2; }
/usr/bin/python3 -c "import torch" 2>/dev/null || {
  echo "anchor_compare: the anchor needs python3-torch: sudo apt-get install -y python3-torch" >&2; exit 2; }
work="${TMPDIR:-/var/tmp}/shardlight_anchor_compare"
rm -rf "$work"; mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

anchor=$(cd "$anchors" && /usr/bin/python3 pytorch_dcp_bench.py 4 3 "$work/pt" 8 4096 4096)
echo "$anchor" | sed 's/^/pytorch 1.13  /'
bazel build -c opt //tools/bench:checkpoint_bench >/dev/null 2>&1
ours=$(bazel-bin/tools/bench/checkpoint_bench --gib=0.5 --tensors=8 --cols=4096 --dir="$work/sl" \
       --drop_cache=false --repeats=3)
echo "$ours" | grep -E "^  (save W=4 \(with fsync\)|load W=3 \(reshard\)) " | sed 's/^ */shardlight    /'

pt_save=$(awk '/^save/ {sub("s","",$5); print $5}' <<<"$anchor")
pt_load=$(awk '/^load/ {sub("s","",$5); print $5}' <<<"$anchor")
sl_save=$(awk '/^  save W=4 \(with fsync\) / {print $5}' <<<"$ours")
sl_load=$(awk '/^  load W=3 \(reshard\) / {print $4}' <<<"$ours")
awk -v a="$pt_save" -v b="$sl_save" -v c="$pt_load" -v d="$sl_load" 'BEGIN {
  printf "speedup over pytorch: save W=4 %.2fx, load W=3 (reshard) %.2fx (aim: >= 3x)\n", a / b, c / d }'
