#!/usr/bin/env bash
# The cluster binary's flag checks and run identity (issue 15, defects 8 and
# 10): every flag that could never do what it says exits 2 before anything
# runs, and a checkpoint directory of another run is refused.
set -u
source "$(dirname "$0")/cli_test_lib.sh" "$1" || { echo "FAIL: cannot source cli_test_lib.sh" >&2; exit 1; }

# Issue 15, defect 10: flags that could never do what they say exit 2 before
# anything runs (each case below would otherwise train).
expect_exit 2 "fault step 3 never comes: phase 1 runs steps 1..2 of --steps=4" --steps=4 --fault=crash:rank=0,step=3
expect_exit 2 "unexpected argument 'steps=4'" steps=4
expect_exit 2 'byte 19 is a space' "--fault=crash:rank=0,step=2
"
expect_exit 2 "--fault applies to --scenario=train; scenario 'roundtrip' would ignore it" \
  --scenario=roundtrip --fault=crash:rank=0,step=1
expect_exit 2 "--async_checkpoint applies to --scenario=train; scenario 'roundtrip' would ignore it" \
  --scenario=roundtrip --async_checkpoint
touch "$TEST_TMPDIR/a_file"
expect_exit 2 "--checkpoint_dir='$TEST_TMPDIR/a_file' is a file, not a directory" --checkpoint_dir="$TEST_TMPDIR/a_file"
expect_exit 2 "cannot be a directory: '$TEST_TMPDIR/a_file' is a file" --checkpoint_dir="$TEST_TMPDIR/a_file/sub"
expect_exit 2 "--checkpoint_dir='/proc/ckpt' cannot be created" --checkpoint_dir=/proc/ckpt

# Issue 15, defect 8: another run's checkpoint is refused, saying what
# differs (the world size may differ); a finished run has nothing to do.
d="$TEST_TMPDIR/run8"
sync_out=$("$bin" --world_size=3 --steps=4 --seed=1 --checkpoint_dir="$d" 2>&1) || fail "run8 exited $?: $sync_out"
digest=$(grep "final state digest" <<<"$sync_out") || fail "run8 printed no digest: $sync_out"

# Background checkpoints (issue 11): the same run, its checkpoints written
# asynchronously, ends in the same state.
out=$("$bin" --world_size=3 --steps=4 --seed=1 --async_checkpoint --checkpoint_dir="$TEST_TMPDIR/async" 2>&1) ||
  fail "async run exited $?: $out"
grep -qF "background checkpoints in" <<<"$out" || fail "async run: $out"
if ! grep -qF "$digest" <<<"$out"; then
  # Once in CI (stop 32, torch 2.15) the synchronous run ended in a state no
  # rerun reproduced. A second synchronous run tells the two failures apart:
  # if it agrees with the async one, the first run was not reproducible (a
  # defect of its own, reported loudly here) and async changed nothing.
  again=$("$bin" --world_size=3 --steps=4 --seed=1 --checkpoint_dir="$TEST_TMPDIR/sync_again" 2>&1) ||
    fail "second sync run exited $?: $again"
  digest2=$(grep "final state digest" <<<"$again") || fail "second sync run printed no digest: $again"
  grep -qF "$digest2" <<<"$out" ||
    fail "async run ended in another state than two synchronous runs ('$digest', '$digest2'): $out
first synchronous run: $sync_out"
  echo "WARNING: two synchronous runs of seed 1 ended apart ('$digest', '$digest2'; async agrees with the second)." >&2
  echo "first synchronous run: $sync_out" >&2
  echo "second synchronous run: $again" >&2
fi
out=$("$bin" --world_size=2 --steps=6 --seed=99 --checkpoint_dir="$d" 2>&1); got=$?
[ "$got" -eq 1 ] || fail "other seed exited $got, want 1: $out"
grep -qF "is from a different run: seed 1 there, 99 here" <<<"$out" || fail "other seed: $out"
out=$("$bin" --world_size=2 --steps=4 --seed=99 --allow_different_run --checkpoint_dir="$d" 2>&1) ||
  fail "allowed rerun exited $?: $out"
grep -qF "nothing to do: the checkpoint in $d is at step 4, and --steps=4 ends at step 4" <<<"$out" ||
  fail "finished rerun: $out"
grep -q "phase 1:" <<<"$out" && fail "finished rerun printed phases: $out"

echo PASS
