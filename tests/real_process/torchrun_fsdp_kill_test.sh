#!/usr/bin/env bash
# Issue 45, deliverable 7: a rank killed inside a per-unit FSDP collective.
# The LM job (float64, a tiny GPT of two blocks) trains as 3 torchrun
# processes under --strategy=fsdp (one block gathered at a time), saving a
# checkpoint root after every step. In step 3 (counted from 0, as errors
# name steps: the one logged "lm: step 4") one rank kills itself (SIGKILL:
# train --die_in) as it enters
#   - block1's forward all-gather (rank 1),
#   - block0's reduce-scatter (rank 2),
#   - block0's backward all-gather (rank 0, the store host).
# Every surviving rank must fail naming the killed rank ("rank V is gone")
# and a collective of step 3, and exit, within the collective timeout of the
# kill (10 s; they take about 1 s: each survivor's process is watched, not
# the launcher, which polls its workers every few seconds and under load
# ends the job much later), the job must fail, and 'latest' must be step 3.
# Then 2 processes (W-1) resume that root -- resharding every shard and
# AdamW moment from 3 ranks to 2 -- and their losses at steps 4..6 must equal
# the uninterrupted 3-process run's within 1e-12 relative (what the fp64
# resume tests ask of fsdp at another world size: the sums differ only in
# their rounding order), plus the 1e-12 the log's 12 decimals round to.
source "$(dirname "$0")/common.sh" "$@"

steps=6
timeout_ms=10000
small=(--job=lm --strategy=fsdp --lm_dtype=float64 --lm_dim=24 --lm_heads=2 --lm_mlp=48 --lm_context=16 --lm_layers=2
  --batch=6 --seed=5 --log_every=1 --threads=1 --steps=$steps --timeout_ms=$timeout_ms)

out=$(torchrun_job 3 "$train_bin" "${small[@]}" --mesh=3x1 2>&1) || fail "uninterrupted 3-process job exited $?: $out"
full=$(lm_losses "$out")
[ "$(wc -l <<<"$full")" -eq $steps ] || fail "want $steps loss lines: $out"
note "uninterrupted 3x1 losses: $(tr '\n' ' ' <<<"$full")"

for plan in "1 all-gather block1 1" "2 reduce-scatter block0 1" "0 all-gather block0 2"; do
  read -r victim collective unit n <<<"$plan"
  what="rank $victim in the $collective #$n of $unit at step 3"
  ckpt="$work/root_$victim"
  log="$work/kill_$victim.out"
  torchrun_job 3 --max_restarts=0 "$train_bin" "${small[@]}" --mesh=3x1 --checkpoint_dir="$ckpt" --checkpoint_every=1 \
    --keep_last=2 --die_in="$collective:rank=$victim,step=3,unit=$unit,n=$n" >"$log" 2>&1 &
  job=$!
  survivors=$(printf '%s\n' 0 1 2 | grep -vx "$victim" | tr '\n' ' ')
  watch_die_in_kill "$victim" "$survivors" "train: rank $victim: --die_in: killed in the $collective #$n of unit $unit at step 3" \
    "$log" "$ckpt" "$what"
  expect_survivors_named_it $job "$victim" "$survivors" "$log" "$ckpt" "$what" \
    "fsdp the [a-z-]* of unit \"block[01]\" at step 3 failed" $timeout_ms step-000003

  # W-1: 2 processes resume the root's last checkpoint (resharded 3 -> 2).
  out=$(torchrun_job 2 "$train_bin" "${small[@]}" --mesh=2x1 --checkpoint_dir="$ckpt" --checkpoint_every=1 --keep_last=2 2>&1) ||
    fail "$what: the 2-process resume exited $?: $out"
  grep -q "lm: resumed at step 3 from the shardlight checkpoint in $ckpt/step-000003" <<<"$out" ||
    fail "$what: the 2-process job did not resume step 3: $out"
  resumed=$(lm_losses "$out")
  expect_resumed_losses "$full" "$resumed" 3 "$what"
  note "$what: 2x1 resumed losses $(tr '\n' ' ' <<<"$resumed")equal the uninterrupted run's"
done
echo "PASS"
