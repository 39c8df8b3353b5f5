#!/usr/bin/env bash
# peer.sh's torchrun_once_more against a stand-in torchrun: a job a signal
# killed runs once more and only the second log is the output; any other
# failure, or a second death, is not retried and keeps the exit status. Then
# the LM peer's run_peer (tools/lm/lm_lib.sh), which goes through it.
# Usage: torchrun_once_more_test.sh PEER_SH LM_LIB_SH
set -euo pipefail
peer_sh=$1 lm_lib=$2
tmp=${TEST_TMPDIR:-$(mktemp -d)}
# The stand-in: plays the outcomes listed in $PLAN, one per call.
cat >"$tmp/torchrun" <<'SH'
#!/usr/bin/env bash
n=$(($(cat "$PLAN.calls" 2>/dev/null || echo 0) + 1))
echo "$n" >"$PLAN.calls"
case $(sed -n "${n}p" "$PLAN") in
  ok) echo "peer: step 1 loss 1.5 (call $n)"; exit 0 ;;
  signal) echo "peer: step 1 loss 9.9 (call $n)"; echo "  exitcode  : -6 (pid: 95)"; exit 1 ;;
  error) echo "Traceback: ValueError (call $n)"; echo "  exitcode  : 1 (pid: 95)"; exit 3 ;;
esac
SH
chmod +x "$tmp/torchrun"
# shellcheck source=/dev/null
source "$peer_sh"
export PLAN=$tmp/plan
fails=0
check() { if [ "$1" != "$2" ]; then echo "FAIL: $3: got '$1', want '$2'"; fails=1; fi; }
# attempt RUNNER OUTCOME...: the stand-in's next outcomes; then the runner's
# output, status, calls and stderr.
attempt() {
  local runner=$1
  shift
  printf '%s\n' "$@" >"$PLAN"
  rm -f "$PLAN.calls"
  rc=0
  out=$($runner 2>"$tmp/stderr") || rc=$?
  calls=$(cat "$PLAN.calls")
}
direct() { torchrun_once_more "$tmp/job.log" "$tmp/torchrun" --nproc_per_node=4 job.py; }
attempt direct signal ok
check "$rc" 0 "a death by a signal, then success: status"
check "$out" "peer: step 1 loss 1.5 (call 2)" "a death by a signal, then success: only the second log"
check "$calls" 2 "a death by a signal, then success: calls"
grep -q "WARNING: a process of the torchrun job (.*job.py) died by a signal" "$tmp/stderr" || { echo "FAIL: no WARNING naming the job"; fails=1; }
grep -q "loss 9.9 (call 1)" "$tmp/stderr" || { echo "FAIL: the first log is not on stderr"; fails=1; }
attempt direct signal signal ok
check "$rc" 1 "two deaths: status"
check "$calls" 2 "two deaths: calls"
attempt direct error ok
check "$rc" 3 "an error: status"
check "$calls" 1 "an error: calls (no retry)"
case $out in *"ValueError (call 1)"*) ;; *) echo "FAIL: an error's log is not the output: $out"; fails=1 ;; esac
attempt direct ok
check "$rc" 0 "success: status"
check "$calls" 1 "success: calls"
# run_peer: lm_lib.sh sources a peer.sh; this one is the real one with the stand-in torchrun.
printf 'source %q\nLIBTORCH_TORCHRUN=%q\nLIBTORCH_TORCHRUN_FLAGS=\n' "$(realpath "$peer_sh")" "$tmp/torchrun" >"$tmp/peer.sh"
(
  # shellcheck source=/dev/null
  source "$lm_lib" "$tmp/peer.sh" "$tmp/logs"
  lm() { run_peer 4 peer.py; }
  attempt lm signal ok
  check "$rc" 0 "run_peer: a death by a signal, then success: status"
  check "$out" "peer: step 1 loss 1.5 (call 2)" "run_peer: only the second log"
  attempt lm error
  check "$rc" 3 "run_peer: an error: status"
  check "$calls" 1 "run_peer: an error: calls"
  exit "$fails"
) || fails=1
[ "$fails" = 0 ] && echo "PASS"
exit "$fails"
