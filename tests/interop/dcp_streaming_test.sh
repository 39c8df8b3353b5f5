#!/usr/bin/env bash
# A DCP load and import stream: on a 384 MiB checkpoint real torch wrote
# (dcp_big_save.py at W=4: 8 row-sharded tensors, and a plain one whose 96 MiB
# payload is larger than the slack below), `ckpt import` peaks within
# its own footprint on a 4 MiB one + 64 MiB, and LoadCheckpoint (dcp_load_run,
# 2 thread-ranks) within its footprint on the 4 MiB one + the destination
# bytes + 64 MiB: peak memory is the destinations and a bounded buffer,
# whatever the checkpoint's size. torch 2.x leg.
load="$1"; ckpt="$2"; big_save="$3"
source "$(dirname "$0")/dcp_lib.sh" "$4" dcps || { echo "FAIL: cannot source dcp_lib.sh"; exit 1; }
slack_kib=$((64 * 1024))
torchrun_py 4 "$big_save" 8 "$tmp/dcp4" 4 "$tmp/dcp384" 384 >"$tmp/save.log" 2>&1 ||
  { cat "$tmp/save.log"; fail "dcp.save of 4 and 384 MiB"; }
data=$(cat "$tmp"/dcp384/*.distcp | wc -c)
[ "$data" -ge $((380 << 20)) ] || fail "the large checkpoint holds only $data bytes"

# ckpt import: one tile at a time, nothing held but the reader's and writer's buffers.
for size in 4 384; do
  /usr/bin/time -f "%M" -o "$tmp/import$size.rss" "$ckpt" --world_size=2 import "$tmp/dcp$size" "$tmp/out$size" \
    >"$tmp/import$size.log" 2>&1 || { cat "$tmp/import$size.log"; fail "ckpt import of $size MiB"; }
done
grep -qE ": 11 tensors (and [0-9]+ non-tensor entries )?for 2 ranks" "$tmp/import384.log" || fail "import: $(cat "$tmp/import384.log")"
"$ckpt" verify "$tmp/out384" >"$tmp/verify.log" 2>&1 || { tail "$tmp/verify.log"; fail "the import does not verify"; }
small=$(tail -1 "$tmp/import4.rss"); big=$(tail -1 "$tmp/import384.rss")
[ "$big" -le $((small + slack_kib)) ] ||
  fail "ckpt import of 384 MiB peaked at $big KiB, over its footprint on 4 MiB ($small KiB) + 64 MiB"
echo "ok  ckpt import: $small KiB on 4 MiB, $big KiB on $((data >> 20)) MiB"

# LoadCheckpoint: the destinations plus a bounded buffer.
for size in 4 384; do
  out=$("$load" "$tmp/dcp$size" 2) || fail "LoadCheckpoint of $size MiB: $out"
  eval "$(tr ' ' '\n' <<<"$out" | sed -n 's/^\(peak_rss_kib\|destination_bytes\)=/load'"$size"'_\1=/p')"
done
# shellcheck disable=SC2154 # set by the eval above
budget=$((load4_peak_rss_kib + load384_destination_bytes / 1024 + slack_kib))
# shellcheck disable=SC2154
[ "$load384_peak_rss_kib" -le "$budget" ] ||
  fail "LoadCheckpoint of 384 MiB peaked at $load384_peak_rss_kib KiB, over its footprint on 4 MiB ($load4_peak_rss_kib KiB) + $((load384_destination_bytes >> 10)) KiB of destinations + 64 MiB"
echo "ok  LoadCheckpoint: $load4_peak_rss_kib KiB on 4 MiB, $load384_peak_rss_kib KiB on 384 MiB (budget $budget KiB)"
echo "PASS"
