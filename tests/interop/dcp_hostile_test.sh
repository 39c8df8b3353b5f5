#!/usr/bin/env bash
# Hostile and broken DCP checkpoints (a directory real torch wrote, damaged by
# dcp_damage.py): every ckpt command that reads ends in a clear error naming
# the file or key, within a time limit and a memory budget (the tool's
# footprint on the undamaged checkpoint + 64 MiB). A class outside DCP's metadata is refused without running.
ckpt="$1"; damage="$2"; peer_save="$3"
source "$(dirname "$0")/dcp_lib.sh" "$4" dcph || { echo "FAIL: cannot source dcp_lib.sh"; exit 1; }
torchrun_py 4 "$peer_save" "$tmp/good" "$tmp/ref.pt" "$tmp/values.txt" >"$tmp/save.log" 2>&1 || { cat "$tmp/save.log"; fail "dcp.save"; }
/usr/bin/time -f "%M" -o "$tmp/rss" "$ckpt" verify "$tmp/good" >/dev/null || fail "the undamaged checkpoint does not verify"
rm -f /tmp/dcp_damage_pwned
# The tool's own footprint with this LibTorch (~160 MB with 1.13, more with the
# 2.x CUDA wheel), measured on the undamaged checkpoint, plus 64 MiB.
budget_kb=$(($(tail -1 "$tmp/rss") + 64 * 1024))
# case  commands  text the error must hold (inspect reads .metadata only)
while read -r case cmds want; do
  d="$tmp/$case"
  cp -r "$tmp/good" "$d"
  "$LIBTORCH_PYTHON" "$damage" "$case" "$d" || fail "$case: could not damage the copy"
  for cmd in ${cmds//,/ }; do
    out=$(/usr/bin/time -f "%M" -o "$tmp/rss" timeout 60 "$ckpt" "$cmd" "$d" 2>&1)
    rc=$?
    [ "$rc" = 124 ] && fail "$case: ckpt $cmd ran past 60 s"
    [ "$rc" = 0 ] && fail "$case: ckpt $cmd accepted the damaged checkpoint: $out"
    grep -q -- "$want" <<<"$out" || fail "$case: ckpt $cmd: the error does not name '$want': $out"
    rss=$(tail -1 "$tmp/rss")
    [ "$rss" -le "$budget_kb" ] || fail "$case: ckpt $cmd peaked at ${rss} KB, over the ${budget_kb} KB budget"
  done
  echo "ok  $case: $(grep -m1 -- "$want" <<<"$out" | cut -c1-200)"
done <<'CASES'
overlap inspect,verify emb.weight
hole inspect,verify emb.weight
exceeds inspect,verify emb.weight
huge inspect,verify emb.weight
past_end verify emb.weight
long verify emb.weight
class inspect,verify posix.system
deep inspect,verify planner_data
cycle inspect,verify planner_data
missing verify __2_0.distcp
truncated verify __1_0.distcp
metadata_truncated inspect,verify .metadata
transform inspect,verify stream_zstd
stride_negative verify negative stride
stride_zero verify zero stride
stride_overlap verify not a dense layout
stride_past_storage verify overrun its storage
stride_overflow verify not a dense layout
CASES
[ -e /tmp/dcp_damage_pwned ] && fail "a class in .metadata was run"
echo "PASS"
