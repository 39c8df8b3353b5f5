#!/usr/bin/env bash
# checkpoint_bench's GiB mode refuses, before it allocates anything, a single
# --tensors count whose row floor would make the state many times --gib (a
# lone --tensors=100000 once ran 11 minutes into an out-of-memory kill); a
# small state just above --gib still runs, and the series takes that count.
set -u
bench="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$bench" --tensors=100000 --dir="$tmp/big" 2>&1)
rc=$?
[ "$rc" = 2 ] || fail "--tensors=100000: exit $rc, want 2: $out"
grep -q -- "--tensors=100000 of --cols=4096 need at least 12 rows each, 18.31 GiB of state, not the 1 GiB of --gib" \
  <<<"$out" || fail "--tensors=100000: unexpected message: $out"
grep -q -- "--tensors=100,100000" <<<"$out" || fail "the message does not name the series: $out"
[ ! -e "$tmp/big/ckpt" ] || fail "--tensors=100000 created a checkpoint directory before refusing"

# 8 tensors of 12 x 4096 floats are 1.5 MiB for --gib=0.001 (1 MiB): within 2x, run.
out=$("$bench" --gib=0.001 --tensors=8 --dir="$tmp/small" --drop_cache=false --repeats=1 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "--gib=0.001 --tensors=8: exit $rc: $out"
grep -q "save W=4" <<<"$out" || fail "--gib=0.001 --tensors=8 printed no save row: $out"

# The series (two counts or more) is the mode for many small tensors.
out=$("$bench" --tensors=10,100 --dir="$tmp/series" --drop_cache=false --repeats=1 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "--tensors=10,100: exit $rc: $out"
grep -Eq "^ +100 " <<<"$out" || fail "--tensors=10,100 printed no row for 100 tensors: $out"
echo PASS
