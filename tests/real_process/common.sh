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
