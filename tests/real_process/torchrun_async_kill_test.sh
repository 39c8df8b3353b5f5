#!/usr/bin/env bash
# kill -9 of a worker while its background checkpoint is in flight
# (--async_checkpoint into a root; the save of step 4 is held open by a
# save-delay fault on rank 1, so the kill lands mid-save for sure). The peers
# exit, 'latest' still names step 2 and it verifies, and a new job (also
# asynchronous) resumes from step 2 and commits its own last step. (Resumed
# runs ending bit-identical to uninterrupted ones: torchrun_kill_test and
# //tests:trainer_async_checkpoint_test.)
source "$(dirname "$0")/common.sh" "$@"

out=$("$train_bin" --steps=2 --async_checkpoint 2>&1)
[ $? -eq 2 ] && grep -q -- "--async_checkpoint needs --checkpoint_dir" <<<"$out" || fail "--async_checkpoint alone: $out"

steps=8

ckpt="$work/async_root"
torchrun_job 4 --max_restarts=0 "$train_bin" --steps=$steps --seed=11 --checkpoint_dir="$ckpt" --checkpoint_every=2 \
  --keep_last=2 --async_checkpoint --staging_mib=1 --min_step_ms=50 --timeout_ms=5000 \
  --fault=save-delay:rank=1,step=4,ms=4000 >"$work/kill.out" 2>&1 &
job=$!
# Rank 1's temporary data file of step 4 exists: its save is in flight, held
# before the fsync for 4 s.
for ((i = 0; i < 1200; i++)); do
  compgen -G "$ckpt/step-000004/.tmp-*-r00001.safetensors" >/dev/null && break
  sleep 0.05
done
compgen -G "$ckpt/step-000004/.tmp-*-r00001.safetensors" >/dev/null || fail "the save of step 4 never started: $(cat "$work/kill.out")"
pid=$(worker_pid 1 "$ckpt") || fail "rank 1's process not found"
kill -9 "$pid"
killed_at=$(($(date +%s%N) / 1000000))
wait $job && fail "the job exited 0 after rank 1 was killed: $(cat "$work/kill.out")"
elapsed_ms=$(($(date +%s%N) / 1000000 - killed_at))
note "killed rank 1 (pid $pid) with the save of step 4 in flight; the job ended ${elapsed_ms} ms later"
((elapsed_ms < 35000)) || fail "the peers took ${elapsed_ms} ms to exit"
latest=$(cat "$ckpt/latest")
[ "$latest" = "step-000002" ] || fail "'latest' is '$latest', want step-000002: $(cat "$work/kill.out")"
[ -e "$ckpt/step-000004/index.json" ] && fail "step 4 was committed although rank 1 died before its fsync"
"$ckpt_bin" verify "$ckpt/step-000002" >/dev/null || fail "step-000002 does not verify after the kill"

out=$(torchrun_job 4 "$train_bin" --steps=$steps --seed=11 --checkpoint_dir="$ckpt" --keep_last=2 --async_checkpoint 2>&1) ||
  fail "the resumed job exited $?: $out"
grep -q "^train: resumed from step 2," <<<"$out" || fail "did not resume from step 2: $out"
[ "$(cat "$ckpt/latest")" = "step-000008" ] || fail "the resumed job's last save is not 'latest': $out"
"$ckpt_bin" verify "$ckpt/step-000008" >/dev/null || fail "the resumed job's checkpoint does not verify"
note "resumed from step 2 and saved step 8 in the background"
echo "PASS"
