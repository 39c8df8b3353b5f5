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
# "K L" for each "lm: step K loss L" line (torchrun's [defaultN]: prefix or not).
losses() { sed -n 's/^\(\[default[0-9]*\]:\)\{0,1\}lm: step \([0-9]*\) loss \([0-9.]*\) .*/\2 \3/p' <<<"$1"; }
# The wall-clock in ms.
now_ms() { echo $(($(date +%s%N) / 1000000)); }

out=$(torchrun_job 4 "$train_bin" "${small[@]}" --mesh=2x2 2>&1) || fail "uninterrupted 4-process job exited $?: $out"
full=$(losses "$out")
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
  pids=
  for r in $survivors; do
    pid=
    for ((i = 0; i < 1200; i++)); do
      pid=$(worker_pid "$r" "$ckpt") && break
      sleep 0.05
    done
    [ -n "$pid" ] || fail "$what: rank $r's process not found: $(cat "$log")"
    pids="$pids $pid"
  done
  # The victim's last line, written just before its SIGKILL; then each
  # survivor's error line, and each survivor's exit (its process gone or a
  # zombie: torchrun reaps its workers only when it polls them).
  killed_at= named_ms= stopped_ms=
  for ((i = 0; i < 2400; i++)); do
    if [ -z "$killed_at" ]; then
      grep -q "train: rank $victim: --die_in: killed in the $collective #1 of unit model at step 3" "$log" ||
        { sleep 0.05; continue; }
      killed_at=$(now_ms)
    fi
    if [ -z "$named_ms" ]; then
      named=0
      for r in $survivors; do grep -q "train: rank $r: .*rank $victim is gone" "$log" && named=$((named + 1)); done
      [ $named -eq 3 ] && named_ms=$(($(now_ms) - killed_at))
    fi
    alive=0
    for pid in $pids; do
      [ -e "/proc/$pid" ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] && alive=$((alive + 1))
    done
    if [ $alive -eq 0 ]; then
      stopped_ms=$(($(now_ms) - killed_at))
      break
    fi
    sleep 0.05
  done
  [ -n "$killed_at" ] || fail "$what: the victim never reached it: $(cat "$log")"
  [ -n "$stopped_ms" ] || fail "$what: the survivors did not stop: $(cat "$log")"
  wait $job && fail "$what: the job exited 0: $(cat "$log")"
  ended_ms=$(($(now_ms) - killed_at))
  out=$(cat "$log")
  for r in $survivors; do
    line=$(grep "train: rank $r: " <<<"$out" | grep -v -- "--die_in" | tail -1)
    grep -q "rank $victim is gone" <<<"$line" || fail "$what: rank $r did not name rank $victim: $out"
    # Not a survivor as the rank that failed (a DP peer of the victim once said "failed on rank <itself>").
    grep -q "failed on rank [0-9]" <<<"$line" && fail "$what: rank $r blames a survivor: $line"
    grep -q "fsdp_tp all-gather at step 3\|training step 3 (fsdp_tp reduce-scatter)" <<<"$line" ||
      fail "$what: rank $r did not fail in an fsdp_tp collective of step 3: $line"
    note "$what: rank $r: ${line#*train: rank $r: }"
  done
  ((stopped_ms < timeout_ms)) || fail "$what: the survivors stopped ${stopped_ms} ms after the kill (timeout ${timeout_ms} ms): $out"
  note "$what: every survivor named it (${named_ms:-?} ms after the kill) and stopped (${stopped_ms} ms); the job ended after ${ended_ms} ms (collective timeout ${timeout_ms} ms)"
  [ "$(cat "$ckpt/latest")" = "step-000003" ] || fail "$what: 'latest' is '$(cat "$ckpt/latest")', want step-000003"
  "$ckpt_bin" verify "$ckpt/step-000003" >/dev/null || fail "$what: step-000003 does not verify"

  # W-1: 3 processes resume the root's last checkpoint under fsdp_tp on 3x1.
  out=$(torchrun_job 3 "$train_bin" "${small[@]}" --mesh=3x1 --checkpoint_dir="$ckpt" --checkpoint_every=1 --keep_last=2 2>&1) ||
    fail "$what: the 3-process resume exited $?: $out"
  grep -q "lm: resumed at step 3 from the shardlight checkpoint in $ckpt/step-000003" <<<"$out" ||
    fail "$what: the 3-process job did not resume step 3: $out"
  resumed=$(losses "$out")
  [ "$(wc -l <<<"$resumed")" -eq $((steps - 3)) ] || fail "$what: want $((steps - 3)) loss lines after the resume: $out"
  join <(echo "$full") <(echo "$resumed") | awk -v want=$((steps - 3)) '
    { d = $2 - $3; if (d < 0) d = -d; if (d > 1e-12 * $2 + 1e-12) { print "step " $1 ": " $3 " resumed, " $2 " uninterrupted"; bad = 1 } n++ }
    END { exit bad || n != want }' || fail "$what: the resumed losses differ from the uninterrupted run's"
  note "$what: 3x1 resumed losses $(tr '\n' ' ' <<<"$resumed")equal the uninterrupted run's"
done
echo "PASS"
