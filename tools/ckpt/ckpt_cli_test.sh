#!/usr/bin/env bash
# The ckpt tool as a user runs it: inspect, verify, consolidate on a good
# checkpoint; verify and consolidate on a corrupt one; usage errors. (Hostile
# indexes, reshard/diff and checkpoint roots are in ckpt_cli_*_test.sh, run
# in parallel.)
source "$(dirname "$0")/ckpt_cli_lib.sh"

"$maker" make "$tmp/good" || fail "could not make the test checkpoint"

# inspect: a row per key with kind, dtype, shape, shard count and coverage.
expect_exit 0 "saved by 3 ranks" inspect "$tmp/good"
grep -qF "  run: maker=make_test_checkpoint, salt=" <<<"$LAST" || fail "inspect does not show the run record: $LAST"
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
file=$(flip_last_byte "$tmp/bad")
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

# Not a checkpoint.
expect_exit 1 "no checkpoint at" inspect "$tmp/nowhere"
expect_exit 1 "no checkpoint at" verify "$tmp/nowhere"

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
