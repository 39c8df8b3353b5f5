#!/usr/bin/env bash
# W=4 real processes (torchrun) against W=4 thread-ranks on the same
# measurements, then the time from a killed worker to the other processes'
# exit. Usage: bash tools/bench/process_vs_threads.sh [DIR] [-- bench flags]
# (COMPILATION_MODE=fastbuild reuses a debug build instead of building -c opt.)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-/var/tmp/shardlight-process-bench}
shift || true
[ "${1:-}" = "--" ] && shift
bazel build -c "${COMPILATION_MODE:-opt}" //tools/bench:process_bench //tools/train >/dev/null 2>&1
bench=$(realpath bazel-bin/tools/bench/process_bench)
train=$(realpath bazel-bin/tools/train/train)
rm -rf "$dir" && mkdir -p "$dir"
tr_flags=(--nnodes=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:29411 --nproc_per_node=4 --no_python --redirects=2 --tee=2 --log_dir="$dir/logs")

threads=$("$bench" --mode=threads --world_size=4 --dir="$dir/threads" "$@")
procs=$(torchrun "${tr_flags[@]}" "$bench" --mode=process --dir="$dir/procs" "$@" 2>/dev/null | grep '^processes')
echo "$threads"
echo "$procs"
python3 - "$threads" "$procs" <<'PY'
import re, sys
def fig(line):
    return {k: float(v) for k, v in re.findall(r"(\w+_ms) ([0-9.]+)", line)}
t, p = fig(sys.argv[1]), fig(sys.argv[2])
print("| figure | threads | processes | processes / threads |")
print("|---|---|---|---|")
for k in t:
    print(f"| {k} | {t[k]:.3f} | {p[k]:.3f} | {p[k] / t[k]:.2f} |")
PY

# Kill one worker mid-run; time until torchrun (and so every worker) is gone.
ckpt="$dir/kill"
torchrun "${tr_flags[@]}" --max_restarts=0 "$train" --steps=1000 --checkpoint_dir="$ckpt" --checkpoint_every=5 \
  --min_step_ms=50 --timeout_ms=10000 >"$dir/kill.out" 2>&1 &
job=$!
while [ ! -e "$ckpt/index.json" ]; do sleep 0.1; done
for pid in $(pgrep -f -- "$ckpt"); do
  [ "$(readlink /proc/$pid/exe)" = "$train" ] && tr '\0' '\n' <"/proc/$pid/environ" | grep -qx RANK=2 && victim=$pid
done
start=$(date +%s%N)
kill -9 "$victim"
first=""
while kill -0 $job 2>/dev/null; do
  if [ -z "$first" ] && grep -q "rank 2 is gone" "$dir/kill.out"; then first=$(date +%s%N); fi
  sleep 0.02
done
end=$(date +%s%N)
[ -n "$first" ] || first=$end
echo "killed worker -> first peer's error naming it: $(((first - start) / 1000000)) ms; -> torchrun exit: $(((end - start) / 1000000)) ms (collective timeout 10000 ms)"
