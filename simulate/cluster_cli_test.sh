#!/usr/bin/env bash
# The cluster binary as a user runs it: default run, --help, bad flags.
set -u
bin="$1"
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$bin" --world_size=3 --steps=2 2>&1) || fail "default scenario exited $?: $out"
grep -q "collectives: 3 ranks" <<<"$out" || fail "no report header in: $out"
[ "$(grep -cE '^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$' <<<"$out")" -eq 3 ] || fail "want 3 rank rows: $out"

gate=$("$bin" --scenario=gate --world_size=2 2>&1) || fail "gate scenario exited $?: $gate"
grep -qE "^this process \(real\) +1\.13\.0 +hooks" <<<"$gate" || fail "gate: real build row: $gate"
grep -qE "^sim: ngc-21.07 +1\.10\.0a0\+ecc3718 +no hooks +gather,scatter" <<<"$gate" || fail "gate: NGC row: $gate"
grep -q "all required collectives work" <<<"$gate" || fail "gate: probe line: $gate"

help=$("$bin" --help 2>&1)
grep -q -- "--world_size" <<<"$help" || fail "--help does not list --world_size"
grep -q "collectives:" <<<"$help" || fail "--help does not list the scenarios"

expect_exit() {
  local want="$1" needle="$2"; shift 2
  local got out
  out=$("$bin" "$@" 2>&1); got=$?
  [ "$got" -eq "$want" ] || fail "$* exited $got, want $want: $out"
  grep -q -- "$needle" <<<"$out" || fail "$*: message lacks '$needle': $out"
}
expect_exit 2 "outside \[1, 64\]" --world_size=0
expect_exit 2 "outside \[1, 64\]" --world_size=65
expect_exit 2 "unknown --scenario='nope'" --scenario=nope
expect_exit 2 "must be >= 1" --steps=0
expect_exit 2 "bad value 'abc' for --world_size" --world_size=abc
expect_exit 2 "unknown flag '--bogus'" --bogus=1
echo PASS
