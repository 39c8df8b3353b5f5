#!/usr/bin/env bash
# ckpt reshard and diff as a user runs them: outputs that load on their
# world size, diffs across layouts, corrupt inputs, bad usage.
source "$(dirname "$0")/ckpt_cli_lib.sh"

"$maker" make "$tmp/good" || fail "could not make the test checkpoint"
cp -r "$tmp/good" "$tmp/bad"
flip_last_byte "$tmp/bad" >/dev/null

# reshard: for 5 ranks (more ranks than rows of 'mask': empty shards) and for
# 1; each loads on that many thread-ranks with the saved values, and diff
# finds it equal to the original across the layouts.
expect_exit 0 "wrote $tmp/r5: 6 tensors for 5 ranks" --world_size=5 reshard "$tmp/good" "$tmp/r5"
expect_exit 0 "saved by 5 ranks" inspect "$tmp/r5"
grep -qF "  run: maker=make_test_checkpoint, salt=" <<<"$LAST" || fail "reshard dropped the run record: $LAST"
grep -Eq '^proj\.weight +sharded +BF16 +\[6, 10\] +5 +100%' <<<"$LAST" || fail "proj.weight not chunked on its saved dim: $LAST"
"$maker" load "$tmp/r5" 5 2 || fail "the 5-rank reshard does not load on 5 and 2 ranks"
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

echo PASS
