#!/usr/bin/env bash
# kill -9 of one worker in the middle of a real run.
#  1. Under torchrun --max_restarts=1: torchrun restarts the group, the Trainer
#     resumes from the last committed checkpoint, and the final parameters
#     equal an uninterrupted run's.
#  2. Without restarts (rank 2, then rank 0, the store host, killed): every
#     other worker exits non-zero on its own, well within the collective
#     timeout, naming the lost rank; the last checkpoint verifies.
source "$(dirname "$0")/common.sh" "$@"

steps=24
out=$(torchrun_job 4 "$train_bin" --steps=$steps --seed=5 2>&1) || fail "uninterrupted job exited $?: $out"
want=$(digest_of "$out")
[ -n "$want" ] || fail "no digest: $out"
note "uninterrupted 4-process run: digest $want"

# 1. Kill rank 1 after the first checkpoint; torchrun restarts the group.
ckpt="$work/restart"
torchrun_job 4 --max_restarts=1 "$train_bin" --steps=$steps --seed=5 --checkpoint_dir="$ckpt" \
  --checkpoint_every=4 --min_step_ms=150 --timeout_ms=5000 >"$work/restart.out" 2>&1 &
job=$!
wait_for_file "$ckpt/index.json" 120 || fail "no checkpoint appeared: $(cat "$work/restart.out")"
pid=$(worker_pid 1 "$ckpt") || fail "rank 1's process not found"
kill -9 "$pid"
note "killed rank 1 (pid $pid) after the first checkpoint"
wait $job || fail "the restarted job exited $?: $(cat "$work/restart.out")"
out=$(cat "$work/restart.out")
grep -q "^train: resumed from step [1-9]" <<<"$out" || fail "the restarted group did not resume: $out"
got=$(digest_of "$out")
note "killed and restarted run: $(grep '^train: resumed' <<<"$out"), digest $got"
[ "$got" = "$want" ] || fail "after the restart the state is '$got', uninterrupted '$want'"

# 2. The same kill with no restart allowed, of rank 2 and of rank 0 (which
#    hosts the store): every surviving rank names the lost one, whatever
#    order the loss and torchrun's SIGTERM reach it in ($KILL_VICTIMS: others).
timeout_ms=5000
for victim in ${KILL_VICTIMS:-2 0}; do
  ckpt="$work/norestart_$victim"
  torchrun_job 4 --max_restarts=0 "$train_bin" --steps=200 --seed=5 --checkpoint_dir="$ckpt" --checkpoint_every=4 \
    --min_step_ms=100 --timeout_ms=$timeout_ms >"$work/norestart_$victim.out" 2>&1 &
  kill_and_expect_peers_name_it $! "$victim" torchrun RANK "$ckpt" "$work/norestart_$victim.out" $timeout_ms
done
echo "PASS"
