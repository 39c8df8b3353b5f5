#!/usr/bin/env bash
# The ckpt tool as a user runs it: inspect, verify, consolidate on a good
# checkpoint; verify and consolidate on a corrupt one; usage errors.
set -u
ckpt="$1"
maker="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }

expect_exit() {  # expect_exit CODE NEEDLE ARGS...: runs ckpt, checks exit code and output
  local want="$1" needle="$2"; shift 2
  local got out
  out=$("$ckpt" "$@" 2>&1); got=$?
  [ "$got" -eq "$want" ] || fail "ckpt $* exited $got, want $want: $out"
  grep -q -- "$needle" <<<"$out" || fail "ckpt $*: output lacks '$needle': $out"
  LAST="$out"
}

"$maker" make "$tmp/good" || fail "could not make the test checkpoint"

# inspect: a row per key with kind, dtype, shape, shard count and coverage.
expect_exit 0 "saved by 3 ranks" inspect "$tmp/good"
grep -Eq '^embed\.weight +sharded +F32 +\[40, 8\] +3 +100% +1\.2 KiB$' <<<"$LAST" || fail "embed.weight row: $LAST"
grep -Eq '^table +sharded +I64 +\[6, 10\] +6 +100%' <<<"$LAST" || fail "table row: $LAST"
grep -Eq '^mask +sharded +BOOL +\[2\] +3 +100%' <<<"$LAST" || fail "mask row: $LAST"
grep -Eq '^step +dense +I64 +\[\] +1 +100% +8 B$' <<<"$LAST" || fail "step row: $LAST"
[ "$(grep -cE '^(embed|proj|mask|table|head|step)' <<<"$LAST")" -eq 6 ] || fail "want 6 rows: $LAST"

# verify: every tensor ok.
expect_exit 0 "^OK: 6 tensors" verify "$tmp/good"

# consolidate: one safetensors file with the full tensors, with progress.
expect_exit 0 "wrote $tmp/all.safetensors: 6 tensors" --progress=always --buffer_mib=1 consolidate "$tmp/good" "$tmp/all.safetensors"
grep -q "consolidate: .* (100%)" <<<"$LAST" || fail "no final progress line: $LAST"
"$maker" check "$tmp/all.safetensors" || fail "consolidated file differs"
expect_exit 0 "wrote" --progress=never consolidate "$tmp/good" "$tmp/quiet.safetensors"
grep -q "consolidate:" <<<"$LAST" && fail "--progress=never printed progress: $LAST"

# A flipped byte in rank 1's data: verify and consolidate fail, naming it.
cp -r "$tmp/good" "$tmp/bad"
file=$(cd "$tmp/bad" && ls data-*-r00001.safetensors)
size=$(stat -c %s "$tmp/bad/$file")
offset=$((size - 3))
orig=$(od -An -tu1 -j "$offset" -N1 "$tmp/bad/$file" | tr -d ' ')
printf "\\$(printf %03o $(( (orig + 1) % 256 )))" | dd of="$tmp/bad/$file" bs=1 seek="$offset" conv=notrunc status=none
expect_exit 1 "checksum mismatch" verify "$tmp/bad"
grep -q "FAILED  .*key '.*$file" <<<"$LAST" || fail "verify does not name the key and file: $LAST"
grep -q "1 of 6 tensors failed" <<<"$LAST" || fail "verify summary: $LAST"
expect_exit 1 "consolidate failed: key '" consolidate "$tmp/bad" "$tmp/bad.safetensors"
[ -e "$tmp/bad.safetensors" ] && fail "a failed consolidate left its output"
ls "$tmp" | grep -q "bad.safetensors.tmp" && fail "a failed consolidate left its temporary file"

# A damaged index is still shown, with the problem, and exits 1.
cp -r "$tmp/good" "$tmp/gap"
sed -i '0,/"offsets":\[/s//"offsets":[1000,/' "$tmp/gap/index.json"
expect_exit 1 "problem: " inspect "$tmp/gap"

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

# Not a checkpoint.
expect_exit 1 "no checkpoint at" inspect "$tmp/nowhere"
expect_exit 1 "no checkpoint at" verify "$tmp/nowhere"

# reshard: for 5 ranks (more ranks than rows of 'mask': empty shards) and for
# 1; each loads on that many thread-ranks with the saved values, and diff
# finds it equal to the original across the layouts.
expect_exit 0 "wrote $tmp/r5: 6 tensors for 5 ranks" --world_size=5 reshard "$tmp/good" "$tmp/r5"
expect_exit 0 "saved by 5 ranks" inspect "$tmp/r5"
grep -Eq '^proj\.weight +sharded +BF16 +\[6, 10\] +5 +100%' <<<"$LAST" || fail "proj.weight not chunked on its saved dim: $LAST"
"$maker" load "$tmp/r5" 5 || fail "the 5-rank reshard does not load on 5 ranks"
"$maker" load "$tmp/r5" 2 || fail "the 5-rank reshard does not load on 2 ranks"
printf '# rows\ntable=1\n' >"$tmp/layout.txt"
expect_exit 0 "for 1 ranks" --world_size=1 --layout="$tmp/layout.txt" --shard=head.bias=0 reshard "$tmp/good" "$tmp/r1"
grep -Eq '^head\.bias +sharded' <<<"$("$ckpt" inspect "$tmp/r1")" || fail "--shard did not shard head.bias"
"$maker" load "$tmp/r1" 1 || fail "the 1-rank reshard does not load"
expect_exit 0 "^EQUAL: 6 tensors bit for bit" diff "$tmp/good" "$tmp/r5"
expect_exit 0 "^equal   table" --buffer_mib=1 diff "$tmp/r1" "$tmp/good"
expect_exit 2 "names key 'nope', which is not in" --world_size=2 --shard=nope=0 reshard "$tmp/good" "$tmp/r2"
expect_exit 1 "cannot shard dim 4" --world_size=2 --shard=table=4 reshard "$tmp/good" "$tmp/r2"
[ -e "$tmp/r2/index.json" ] && fail "a failed reshard committed"
expect_exit 1 "reshard failed: .*checksum mismatch" --world_size=2 reshard "$tmp/bad" "$tmp/r2"

# diff: other values differ per key (max abs and rel), exit 1; a corrupt input fails naming it.
"$maker" make "$tmp/other" 10 || fail "could not make the second checkpoint"
expect_exit 1 "^5 keys differ, 1 equal" diff "$tmp/good" "$tmp/other"  # the bool mask happens to match
grep -Eq '^DIFFER  embed\.weight: max abs [0-9.e+-]+, max rel [0-9.e+-]+$' <<<"$LAST" || fail "diff line: $LAST"
expect_exit 1 "diff failed: .*checksum mismatch" diff "$tmp/good" "$tmp/bad"
expect_exit 1 "no checkpoint at" diff "$tmp/good" "$tmp/nowhere"

# Bad usage exits 2.
expect_exit 2 "no command given"
expect_exit 2 "unknown command 'frobnicate'" frobnicate "$tmp/good"
expect_exit 2 "inspect takes one operand" inspect
expect_exit 2 "verify takes one operand" verify a b
expect_exit 2 "consolidate takes two operands" consolidate "$tmp/good"
expect_exit 2 "diff takes two operands" diff "$tmp/good"
expect_exit 2 "reshard takes two operands" reshard "$tmp/good"
expect_exit 2 "--world_size must be in" --world_size=0 reshard "$tmp/good" "$tmp/r0"
expect_exit 2 "unknown flag '--bogus'" --bogus=1 inspect "$tmp/good"
expect_exit 2 "--buffer_mib must be in" --buffer_mib=0 inspect "$tmp/good"
expect_exit 2 "--progress must be" --progress=sometimes inspect "$tmp/good"
expect_exit 2 "bad value 'x' for --buffer_mib" --buffer_mib=x inspect "$tmp/good"
echo PASS
