#!/usr/bin/env bash
# The ckpt tool on hostile or damaged checkpoints (issue 15): overflowing
# shapes, FIFOs in place of files, an index emptied of its tensors.
source "$(dirname "$0")/ckpt_cli_lib.sh"

"$maker" make "$tmp/good" || fail "could not make the test checkpoint"

# A hostile index: a shape whose size overflows int64 is shown "(invalid)",
# never computed (checked arithmetic throughout), and inspect exits 1.
cp -r "$tmp/good" "$tmp/overflow"
sed -i 's/"shape": \[40,8\]/"shape": [4294967296,4294967296]/' "$tmp/overflow/index.json"
grep -q '4294967296,4294967296' "$tmp/overflow/index.json" || fail "could not edit the index"
expect_exit 1 "problem: key 'embed.weight': " inspect "$tmp/overflow"
grep -Eq '^embed\.weight +sharded +F32 +\[4294967296, 4294967296\] +3 +\(invalid\) +\(invalid\)$' <<<"$LAST" \
  || fail "overflowing row: $LAST"
grep -q "6 tensors, (invalid) bytes in 3 data files" <<<"$LAST" || fail "overflowing total: $LAST"
grep -Eq '^step +dense +I64 +\[\] +1 +100% +8 B$' <<<"$LAST" || fail "other rows still shown: $LAST"

# Issue 15, defect 1: a FIFO in place of index.json or a data file is refused
# at once (each command under a 20 s timeout; before, open(2) waited forever).
for victim in index.json "$(cd "$tmp/good" && ls data-*-r00001.safetensors)"; do
  rm -rf "$tmp/fifo" && cp -r "$tmp/good" "$tmp/fifo" && rm "$tmp/fifo/$victim" && mkfifo "$tmp/fifo/$victim"
  for cmd in inspect verify consolidate; do
    [ "$cmd" = inspect ] && [ "$victim" != index.json ] && continue  # inspect reads only the index
    args=("$cmd" "$tmp/fifo"); [ "$cmd" = consolidate ] && args+=("$tmp/fifo.safetensors")
    out=$(timeout 20 "$ckpt" "${args[@]}" 2>&1); got=$?
    [ "$got" -eq 1 ] || fail "ckpt $cmd with a FIFO $victim exited $got: $out"
    grep -q "is a FIFO, not a regular file" <<<"$out" || fail "ckpt $cmd with a FIFO $victim: $out"
  done
done

# Issue 15, defect 3: an index emptied of its tensors (checksum line dropped,
# as an older index has none) no longer verifies: the files hold entries.
rm -rf "$tmp/emptied" && cp -r "$tmp/good" "$tmp/emptied"
python3 - "$tmp/emptied/index.json" <<'PY'
import json, sys
index = json.load(open(sys.argv[1]))
index.pop("index_crc32c")
index["tensors"] = []
open(sys.argv[1], "w").write(json.dumps(index))
PY
expect_exit 1 "entries; the index lists 0" verify "$tmp/emptied"
grep -q "3 of 3 data files failed their checks" <<<"$LAST" || fail "emptied index summary: $LAST"
expect_exit 1 "the index lists 0" consolidate "$tmp/emptied" "$tmp/emptied.safetensors"
[ -e "$tmp/emptied.safetensors" ] && fail "consolidate of an emptied index wrote its output"
# The same edit with the checksum line kept is caught by the checksum.
rm -rf "$tmp/renamed" && cp -r "$tmp/good" "$tmp/renamed"
sed -i 's/"embed.weight"/"embed.weighs"/' "$tmp/renamed/index.json"
expect_exit 1 "checksum mismatch" verify "$tmp/renamed"

echo PASS
