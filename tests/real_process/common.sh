# Shared by the real-process tests: paths, the torchrun of the LibTorch the
# build uses, digests, and finding one worker of a running job.
# Usage: source common.sh TRAIN_BIN CLUSTER_BIN CKPT_BIN PEER_SH
set -u
train_bin=$(realpath "$1")
cluster_bin=$(realpath "$2")
ckpt_bin=$(realpath "$3")
# shellcheck source=/dev/null
source "$4"  # LIBTORCH_TORCHRUN, LIBTORCH_TORCHRUN_FLAGS (@libtorch//:peer.sh)
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/real.XXXXXX")
logs="$work/torchrun-logs"

fail() { echo "FAIL: $*" >&2; exit 1; }
note() { echo "--- $*"; }

if [ -z "$LIBTORCH_TORCHRUN" ]; then
  echo "SKIP: the LibTorch at $LIBTORCH_PREFIX comes without Python, so without torchrun (a libtorch zip); real-process tests need the torch it belongs to"
  exit 0
fi
[ -x "$LIBTORCH_TORCHRUN" ] || fail "torchrun $LIBTORCH_TORCHRUN is missing: run tools/setup.sh (python3-torch), or tools/setup.sh --torch2"
torchrun() { "$LIBTORCH_TORCHRUN" "$@"; }

# peer.sh's LIBTORCH_TORCHRUN_FLAGS tee workers' stderr with a [defaultN]:
# prefix, whole lines, kept under --log_dir (Debian 12's 1.13 torchrun also
# crashes without them). The tests match a rank's lines by their own
# "train: rank N:", prefixed or not.
# --standalone would always put its rendezvous on port 29400, so concurrent
# jobs (tests run in parallel) would meet each other: each job gets a free port.
torchrun_job() {
  local n=$1
  shift
  torchrun --nnodes=1 --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$(free_port)" --rdzv_id="job$RANDOM" \
    --nproc_per_node="$n" --no_python $LIBTORCH_TORCHRUN_FLAGS --log_dir="$logs" "$@"
}

free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# "train: final state digest X" from a job's output.
digest_of() { sed -n 's/^train: final state digest \([0-9a-f]*\)$/\1/p' <<<"$1" | tail -1; }

# The simulator's digest for the main job: W ranks to steps/2, then W-1 to steps.
sim_digest() { "$cluster_bin" --world_size="$1" --steps="$2" --seed="$3" | sed -n 's/^final state digest //p'; }

# The pid of the train process with RANK=$1 whose command line holds $2
# ($3: the variable that holds the rank, RANK unless given; mpirun's is
# OMPI_COMM_WORLD_RANK).
worker_pid() {
  local rank=$1 marker=$2 var=${3:-RANK} pid
  for pid in $(pgrep -f -- "$marker"); do
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$train_bin" ] || continue
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "$var=$rank"; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}

# Waits up to $2 seconds for the file $1.
wait_for_file() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [ -e "$1" ] && return 0
    sleep 0.1
  done
  return 1
}

# Kills rank $2 of the running 4-process job $1 (its launcher: $3; the rank's
# variable: $4) once checkpoint root $5 has a checkpoint, then checks that the
# launcher exits non-zero, every other rank names the lost rank in the job's
# output file $6, well within the collective timeout $7 (ms), and the last
# checkpoint still verifies.
kill_and_expect_peers_name_it() {
  local job=$1 victim=$2 launcher=$3 var=$4 ckpt=$5 outfile=$6 timeout_ms=$7 pid killed_at rc elapsed_ms out r
  wait_for_file "$ckpt/index.json" 120 || fail "no checkpoint appeared: $(cat "$outfile")"
  pid=$(worker_pid "$victim" "$ckpt" "$var") || fail "rank $victim's process not found"
  killed_at=$(($(date +%s%N) / 1000000))
  kill -9 "$pid"
  wait "$job"
  rc=$?
  elapsed_ms=$(($(date +%s%N) / 1000000 - killed_at))
  out=$(cat "$outfile")
  [ $rc -ne 0 ] || fail "$launcher exited 0 after a worker was killed: $out"
  for r in 0 1 2 3; do
    ((r == victim)) && continue
    # Rank r's own line (torchrun prefixes it with [defaultr]:; mpirun may
    # put another rank's partial line before it).
    grep -q "train: rank $r: .*rank $victim is gone" <<<"$out" ||
      fail "rank $r did not name the lost rank $victim: $out"
  done
  note "every peer named rank $victim; $launcher exited $rc ${elapsed_ms} ms after the kill (collective timeout $timeout_ms ms)"
  ((elapsed_ms < timeout_ms + 30000)) || fail "the exits took ${elapsed_ms} ms"
  "$ckpt_bin" verify "$ckpt" >/dev/null || fail "the last checkpoint does not verify after the kill of rank $victim"
}

# The LM job's "K L" for each "lm: step K loss L" line of $1 (torchrun's
# [defaultN]: prefix or not).
lm_losses() { sed -n 's/^\(\[default[0-9]*\]:\)\{0,1\}lm: step \([0-9]*\) loss \([0-9.]*\) .*/\2 \3/p' <<<"$1"; }

# The wall-clock in ms.
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# Watches a running job (its output file $4, checkpoint root $5 on its
# command line) in which rank $1 kills itself (train --die_in), writing line
# $3 first; $2: the surviving ranks. Waits for each survivor's process, then
# the victim's line, then each survivor's "rank $1 is gone" line and each
# survivor's exit (its process gone or a zombie: torchrun reaps its workers
# only when it polls them). Sets killed_at (ms: when the victim's line
# appeared), named_ms and stopped_ms (ms after it; named_ms empty unless
# every survivor named the victim). Fails, with
# $6 (what the case is), when a survivor is not found, the victim never
# writes its line, or the survivors do not stop within 2 minutes.
watch_die_in_kill() {
  local victim=$1 survivors=$2 killed_line=$3 log=$4 marker=$5 what=$6 pids= pid r i named alive
  for r in $survivors; do
    pid=
    for ((i = 0; i < 1200; i++)); do
      pid=$(worker_pid "$r" "$marker") && break
      sleep 0.05
    done
    [ -n "$pid" ] || fail "$what: rank $r's process not found: $(cat "$log")"
    pids="$pids $pid"
  done
  killed_at= named_ms= stopped_ms=
  for ((i = 0; i < 2400; i++)); do
    if [ -z "$killed_at" ]; then
      grep -qF "$killed_line" "$log" || { sleep 0.05; continue; }
      killed_at=$(now_ms)
    fi
    if [ -z "$named_ms" ]; then
      named=0
      for r in $survivors; do grep -q "train: rank $r: .*rank $victim is gone" "$log" && named=$((named + 1)); done
      [ $named -eq "$(wc -w <<<"$survivors")" ] && named_ms=$(($(now_ms) - killed_at))
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
}

# Fails ($4: what the case is) unless the resumed losses $2 ("K L" lines)
# are the $3 last of the uninterrupted run's $1, each within 1e-12 relative
# plus the 1e-12 the log's 12 decimals round to.
expect_resumed_losses() {
  [ "$(wc -l <<<"$2")" -eq "$3" ] || fail "$4: want $3 loss lines after the resume, got: $2"
  join <(echo "$1") <(echo "$2") | awk -v want="$3" '
    { d = $2 - $3; if (d < 0) d = -d; if (d > 1e-12 * $2 + 1e-12) { print "step " $1 ": " $3 " resumed, " $2 " uninterrupted"; bad = 1 } n++ }
    END { exit bad || n != want }' || fail "$4: the resumed losses differ from the uninterrupted run's"
}

# After watch_die_in_kill, of the job whose launcher is $1 (its output file
# $4, checkpoint root $5), in which rank $2 killed itself and the ranks $3
# survived ($6: what the case is): the job must fail; each survivor's last
# line must name the victim ("rank $2 is gone") and match $7 (grep's basic
# regex: the collective it failed in); the survivors must have stopped
# within the collective timeout $8 (ms) of the kill -- without the rank
# monitor they would wait it out (or the launcher's SIGTERM grace, timeout +
# 2 s) and name no one; the root's 'latest' must be $9 and verify.
expect_survivors_named_it() {
  local job=$1 victim=$2 survivors=$3 log=$4 ckpt=$5 what=$6 pattern=$7 timeout_ms=$8 latest=$9 ended_ms out r line
  wait "$job" && fail "$what: the job exited 0: $(cat "$log")"
  ended_ms=$(($(now_ms) - killed_at))
  out=$(cat "$log")
  for r in $survivors; do
    line=$(grep "train: rank $r: " <<<"$out" | grep -v -- "--die_in" | tail -1)
    grep -q "rank $victim is gone" <<<"$line" || fail "$what: rank $r did not name rank $victim: $out"
    grep -q "$pattern" <<<"$line" || fail "$what: rank $r did not fail in the collective ($pattern): $line"
    note "$what: rank $r: ${line#*train: rank $r: }"
  done
  ((stopped_ms < timeout_ms)) ||
    fail "$what: the survivors stopped ${stopped_ms} ms after the kill (timeout ${timeout_ms} ms): $out"
  note "$what: every survivor named it (${named_ms:-?} ms after the kill) and stopped (${stopped_ms} ms); the job ended after ${ended_ms} ms (collective timeout ${timeout_ms} ms)"
  [ "$(cat "$ckpt/latest")" = "$latest" ] || fail "$what: 'latest' is '$(cat "$ckpt/latest")', want $latest"
  "$ckpt_bin" verify "$ckpt/$latest" >/dev/null || fail "$what: $latest does not verify"
}
