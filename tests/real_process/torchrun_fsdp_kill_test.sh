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
# "K L" for each "lm: step K loss L" line (torchrun's [defaultN]: prefix or not).
losses() { sed -n 's/^\(\[default[0-9]*\]:\)\{0,1\}lm: step \([0-9]*\) loss \([0-9.]*\) .*/\2 \3/p' <<<"$1"; }
# The wall-clock in ms.
now_ms() { echo $(($(date +%s%N) / 1000000)); }

out=$(torchrun_job 3 "$train_bin" "${small[@]}" --mesh=3x1 2>&1) || fail "uninterrupted 3-process job exited $?: $out"
full=$(losses "$out")
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
  pids=
  for r in $survivors; do
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
      grep -q "train: rank $victim: --die_in: killed in the $collective #$n of unit $unit at step 3" "$log" || { sleep 0.05; continue; }
      killed_at=$(now_ms)
    fi
    if [ -z "$named_ms" ]; then
      named=0
      for r in $survivors; do grep -q "train: rank $r: .*rank $victim is gone" "$log" && named=$((named + 1)); done
      [ $named -eq 2 ] && named_ms=$(($(now_ms) - killed_at))
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
    grep -q "fsdp the [a-z-]* of unit \"block[01]\" at step 3 failed" <<<"$line" ||
      fail "$what: rank $r did not fail in a unit collective of step 3: $line"
    note "$what: rank $r: ${line#*train: rank $r: }"
  done
  # Without the rank monitor the survivors would wait out the collective
  # timeout (or the launcher's SIGTERM grace, timeout + 2 s) and name no one.
  ((stopped_ms < timeout_ms)) || fail "$what: the survivors stopped ${stopped_ms} ms after the kill (timeout ${timeout_ms} ms): $out"
  note "$what: every survivor named it (${named_ms:-?} ms after the kill) and stopped (${stopped_ms} ms); the job ended after ${ended_ms} ms (collective timeout ${timeout_ms} ms)"
  [ "$(cat "$ckpt/latest")" = "step-000003" ] || fail "$what: 'latest' is '$(cat "$ckpt/latest")', want step-000003"
  "$ckpt_bin" verify "$ckpt/step-000003" >/dev/null || fail "$what: step-000003 does not verify"

  # W-1: 2 processes resume the root's last checkpoint (resharded 3 -> 2).
  out=$(torchrun_job 2 "$train_bin" "${small[@]}" --mesh=2x1 --checkpoint_dir="$ckpt" --checkpoint_every=1 --keep_last=2 2>&1) ||
    fail "$what: the 2-process resume exited $?: $out"
  grep -q "lm: resumed at step 3 from the shardlight checkpoint in $ckpt/step-000003" <<<"$out" ||
    fail "$what: the 2-process job did not resume step 3: $out"
  resumed=$(losses "$out")
  [ "$(wc -l <<<"$resumed")" -eq 3 ] || fail "$what: want 3 loss lines after the resume: $out"
  join <(echo "$full") <(echo "$resumed") | awk '
    { d = $2 - $3; if (d < 0) d = -d; if (d > 1e-12 * $2 + 1e-12) { print "step " $1 ": " $3 " resumed, " $2 " uninterrupted"; bad = 1 } n++ }
    END { exit bad || n != 3 }' || fail "$what: the resumed losses differ from the uninterrupted run's"
  note "$what: 2x1 resumed losses $(tr '\n' ' ' <<<"$resumed")equal the uninterrupted run's"
done
echo "PASS"
