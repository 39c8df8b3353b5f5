#!/usr/bin/env bash
# Issue 45, deliverable 7, for fsdp_tp: a rank killed inside FSDP x TP's
# data-parallel collectives. The LM job (float64, a tiny GPT of two blocks)
# trains as 4 torchrun processes under --strategy=fsdp_tp --mesh=2x2 (DP 2 x
# TP 2; DP groups {0, 2} and {1, 3}), saving a checkpoint root after every
# step. fsdp_tp's one unit is the whole model ("model"): one DP all-gather
# and one DP reduce-scatter per step. In step 3 (counted from 0, as errors
# name steps: the one logged "lm: step 4") one rank kills itself (SIGKILL:
# train --die_in) as it enters
#   - the all-gather (rank 1: its DP peer 3 fails in the gather, the other
#     DP group in the world verdict that follows it),
#   - the reduce-scatter (rank 2, after the step's verdict: its DP peer 0
#     fails in the reduce-scatter).
# Every surviving rank must fail naming the killed rank ("rank V is gone")
# and a collective of step 3, and exit, within the collective timeout of the
# kill (10 s; each survivor's process is watched, not the launcher, which
# polls its workers every few seconds), the job must fail, and 'latest' must
# be step 3. Then 3 processes (W-1) resume that root under fsdp_tp on 3x1
# (TP 1: the 2 heads need not split over 3) -- every chunk and AdamW moment
# resharded from (2 DP x 2 TP) to 3 DP ranks -- and their losses at steps
# 4..5 must equal the uninterrupted 4-process run's within 1e-12 relative
# (float64: the sums differ only in their rounding order; what the fp64
# resume tests ask of fsdp_tp at another mesh), plus the 1e-12 the log's 12
# decimals round to. Two cases and 5 steps: CI time is short.
source "$(dirname "$0")/common.sh" "$@"

steps=5
timeout_ms=10000
small=(--job=lm --strategy=fsdp_tp --lm_dtype=float64 --lm_dim=24 --lm_heads=2 --lm_mlp=48 --lm_context=16
  --lm_layers=2 --batch=6 --seed=5 --log_every=1 --threads=1 --steps=$steps --timeout_ms=$timeout_ms)

out=$(torchrun_job 4 "$train_bin" "${small[@]}" --mesh=2x2 2>&1) || fail "uninterrupted 4-process job exited $?: $out"
full=$(lm_losses "$out")
[ "$(wc -l <<<"$full")" -eq $steps ] || fail "want $steps loss lines: $out"
note "uninterrupted 2x2 losses: $(tr '\n' ' ' <<<"$full")"

for plan in "1 all-gather" "2 reduce-scatter"; do
  read -r victim collective <<<"$plan"
  what="rank $victim in fsdp_tp's $collective at step 3"
  ckpt="$work/root_$victim"
  log="$work/kill_$victim.out"
  torchrun_job 4 --max_restarts=0 "$train_bin" "${small[@]}" --mesh=2x2 --checkpoint_dir="$ckpt" --checkpoint_every=1 \
    --keep_last=2 --die_in="$collective:rank=$victim,step=3,unit=model" >"$log" 2>&1 &
  job=$!
  survivors=$(printf '%s\n' 0 1 2 3 | grep -vx "$victim" | tr '\n' ' ')
  watch_die_in_kill "$victim" "$survivors" "train: rank $victim: --die_in: killed in the $collective #1 of unit model at step 3" \
    "$log" "$ckpt" "$what"
  expect_survivors_named_it $job "$victim" "$survivors" "$log" "$ckpt" "$what" \
    "fsdp_tp all-gather at step 3\\|training step 3 (fsdp_tp reduce-scatter)" $timeout_ms step-000003
  # No survivor as the rank that failed (the victim's DP peer once said "failed on rank <itself>").
  for r in $survivors; do
    grep "train: rank $r: " "$log" | grep -v -- "--die_in" | tail -1 | grep -q "failed on rank [0-9]" &&
      fail "$what: rank $r blames a survivor: $(cat "$log")"
  done

  # W-1: 3 processes resume the root's last checkpoint under fsdp_tp on 3x1.
  out=$(torchrun_job 3 "$train_bin" "${small[@]}" --mesh=3x1 --checkpoint_dir="$ckpt" --checkpoint_every=1 --keep_last=2 2>&1) ||
    fail "$what: the 3-process resume exited $?: $out"
  grep -q "lm: resumed at step 3 from the shardlight checkpoint in $ckpt/step-000003" <<<"$out" ||
    fail "$what: the 3-process job did not resume step 3: $out"
  resumed=$(lm_losses "$out")
  expect_resumed_losses "$full" "$resumed" $((steps - 3)) "$what"
  note "$what: 3x1 resumed losses $(tr '\n' ' ' <<<"$resumed")equal the uninterrupted run's"
done
echo "PASS"
