#!/usr/bin/env bash
# run_peer (lm_lib.sh) against a stand-in torchrun: a job a signal killed runs
# once more and only the second log is the output; any other failure, or a
# second death, is not retried and keeps torchrun's exit status.
set -euo pipefail
lib=$1
tmp=${TEST_TMPDIR:-$(mktemp -d)}
# The stand-in: plays the outcomes listed in $tmp/plan, one per call.
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
cat >"$tmp/peer.sh" <<SH
LIBTORCH_PYTHON=/bin/false
LIBTORCH_TORCHRUN=$tmp/torchrun
LIBTORCH_TORCHRUN_FLAGS=
SH
# shellcheck source=/dev/null
source "$lib" "$tmp/peer.sh" "$tmp/logs"
export PLAN=$tmp/plan
fails=0
check() { if [ "$1" != "$2" ]; then echo "FAIL: $3: got '$1', want '$2'"; fails=1; fi; }
# plan OUTCOME...: the stand-in's next outcomes; then run_peer's output, status, calls and stderr.
attempt() {
  printf '%s\n' "$@" >"$PLAN"
  rm -f "$PLAN.calls"
  rc=0
  out=$(run_peer 4 peer.py 2>"$tmp/stderr") || rc=$?
  calls=$(cat "$PLAN.calls")
}
attempt signal ok
check "$rc" 0 "a death by a signal, then success: status"
check "$out" "peer: step 1 loss 1.5 (call 2)" "a death by a signal, then success: only the second log"
check "$calls" 2 "a death by a signal, then success: calls"
grep -q "WARNING: a process of the PyTorch peer died by a signal" "$tmp/stderr" || { echo "FAIL: no WARNING"; fails=1; }
grep -q "loss 9.9 (call 1)" "$tmp/stderr" || { echo "FAIL: the first log is not on stderr"; fails=1; }
attempt signal signal ok
check "$rc" 1 "two deaths: status"
check "$calls" 2 "two deaths: calls"
attempt error ok
check "$rc" 3 "an error: status"
check "$calls" 1 "an error: calls (no retry)"
case $out in *"ValueError (call 1)"*) ;; *) echo "FAIL: an error's log is not the output: $out"; fails=1 ;; esac
attempt ok
check "$rc" 0 "success: status"
check "$calls" 1 "success: calls"
[ "$fails" = 0 ] && echo "PASS"
exit "$fails"
