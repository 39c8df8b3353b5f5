#!/usr/bin/env bash
# kill -9 of rank 0 -- the process that moves 'latest' and deletes old steps --
# at several moments of a real 2-process run that checkpoints every step into
# a checkpoint root with --keep_last=2. After each kill: 'latest' names a step
# that verifies, at most one step beyond keep_last is on disk, and a new job
# resumes from exactly that step and ends with an uninterrupted run's state.
source "$(dirname "$0")/common.sh" "$@"

# Bad --keep_last usage exits 2 before any process group.
out=$("$train_bin" --steps=2 --keep_last=-1 --checkpoint_dir="$work/x" 2>&1)
[ $? -eq 2 ] && grep -q -- "--keep_last=-1 must be >= 0" <<<"$out" || fail "--keep_last=-1: $out"
out=$("$train_bin" --steps=2 --keep_last=2 2>&1)
[ $? -eq 2 ] && grep -q -- "--keep_last needs --checkpoint_dir" <<<"$out" || fail "--keep_last without a dir: $out"

steps=14
out=$(torchrun_job 2 "$train_bin" --steps=$steps --seed=9 2>&1) || fail "uninterrupted job exited $?: $out"
want=$(digest_of "$out")
[ -n "$want" ] || fail "no digest: $out"
note "uninterrupted 2-process run: digest $want"

for delay in 0.15 0.6; do
  ckpt="$work/root_$delay"
  torchrun_job 2 --max_restarts=0 "$train_bin" --steps=$steps --seed=9 --checkpoint_dir="$ckpt" \
    --checkpoint_every=1 --keep_last=2 --min_step_ms=100 --timeout_ms=5000 >"$work/kill_$delay.out" 2>&1 &
  job=$!
  wait_for_file "$ckpt/latest" 120 || fail "no 'latest' appeared: $(cat "$work/kill_$delay.out")"
  sleep "$delay"
  pid=$(worker_pid 0 "$ckpt") || fail "rank 0's process not found (the run ended before the kill?)"
  kill -9 "$pid"
  wait $job && fail "the job exited 0 after rank 0 was killed: $(cat "$work/kill_$delay.out")"
  latest=$(cat "$ckpt/latest")
  [[ "$latest" =~ ^step-0*([0-9]+)$ ]] || fail "'latest' holds '$latest'"
  step=${BASH_REMATCH[1]}
  "$ckpt_bin" verify "$ckpt/$latest" >/dev/null || fail "$latest does not verify after the kill"
  n=$(find "$ckpt" -maxdepth 1 -name 'step-*' | wc -l)
  ((n <= 3)) || fail "$n step directories after the kill (keep_last 2, plus at most the one in flight)"
  out=$(torchrun_job 2 "$train_bin" --steps=$steps --seed=9 --checkpoint_dir="$ckpt" --keep_last=2 2>&1) ||
    fail "the resumed job exited $?: $out"
  grep -q "^train: resumed from step $step," <<<"$out" || fail "did not resume from step $step ('latest'): $out"
  got=$(digest_of "$out")
  [ "$got" = "$want" ] || fail "after the kill at +${delay}s and a resume from step $step the state is '$got', want '$want'"
  note "killed rank 0 at +${delay}s: 'latest' was $latest ($n step directories); resumed, digest matches"
done
echo "PASS"
