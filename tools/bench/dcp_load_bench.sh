#!/usr/bin/env bash
# PyTorch DCP load: throughput and peak memory against plain file I/O of the
# same bytes and against torch's own dcp.load, all in one run. Real torch 2.x
# writes a DCP checkpoint of GIB GiB (tests/interop/dcp_big_save.py under
# torchrun, W=4, Gloo CPU: 8 row-sharded float32 tensors and two small dense
# ones); then, in ROUNDS rounds, alternating:
#   plain read   a sequential read of the .distcp files (dd, 8 MiB reads),
#                one after another and (parallel) all at once, one dd each
#   shardlight   LoadCheckpoint on 4 thread-ranks of one process, into
#                row-sharded ShardedTensors (//tools/bench:dcp_load_run;
#                the load itself, destinations allocated before)
#   plain copy   the .distcp files copied into one file, fsynced (dd)
#   ckpt import  `ckpt --world_size=4 import`: read + write + fsync, the
#                whole process
#   dcp.load     torch's, W=4 torchrun processes into DTensors Shard(0) (the
#                load itself)
# each warm (page cache holding the files) and, when this user may drop the
# page cache (root), cold (dropped before each). Prints the median GiB/s of
# each (min..max over the rounds: the machine's noise), peak RSS, and the
# ratios to plain I/O (the faster of the two plain reads: shardlight's ranks
# read their files at once) and to dcp.load.
# Usage: bash tools/bench/dcp_load_bench.sh [GIB (1; 0.25 is 256 MiB)] [ROUNDS (3)] [DIR]
# Environment: TORCH_VENV (~/.cache/shardlight/torch-2.15.0), BAZEL ("bazel"),
# COMPILATION_MODE (opt); BENCH_BIN, a bazel-bin that holds tools/ckpt/ckpt and
# tools/bench/dcp_load_run already built (with --config=torch2): no build then.
set -euo pipefail
cd "$(dirname "$0")/../.."
gib=${1:-1}
rounds=${2:-3}
dir=${3:-/var/tmp/shardlight-dcp-bench}
venv=${TORCH_VENV:-$HOME/.cache/shardlight/torch-2.15.0}
bazel=${BAZEL:-bazel}
flags=(-c "${COMPILATION_MODE:-opt}" --config=torch2)
if [ -n "${BENCH_BIN:-}" ]; then
  bin=$BENCH_BIN
else
  $bazel build "${flags[@]}" //tools/ckpt //tools/bench:dcp_load_run >/dev/null 2>&1 ||
    { echo "dcp_load_bench: the build failed: $bazel build ${flags[*]} //tools/ckpt //tools/bench:dcp_load_run" >&2; exit 1; }
  bin=$($bazel info "${flags[@]}" bazel-bin 2>/dev/null)
fi
ckpt="$bin/tools/ckpt/ckpt"
load="$bin/tools/bench/dcp_load_run"
export LD_LIBRARY_PATH="$venv/libtorch/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
torchrun4() {
  "$venv/bin/torchrun" --nnodes=1 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$(free_port)" "$@"
}
rm -rf "$dir" && mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
mib=$(/usr/bin/python3 -c "print(int(float('$gib') * 1024))")
torchrun4 tests/interop/dcp_big_save.py 8 "$dir/dcp" "$mib" >"$dir/save.log" 2>&1 ||
  { cat "$dir/save.log"; echo "dcp_load_bench: dcp.save failed" >&2; exit 1; }
bytes=$(cat "$dir"/dcp/*.distcp | wc -c)

can_drop=1
sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || can_drop=0
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
# Runs a command; prints "seconds peak_rss_kib" of the whole process.
timed() {
  /usr/bin/python3 -c '
import resource, subprocess, sys, time
t = time.time()
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
if rc: sys.exit(rc)
print(f"{time.time() - t:.4f}", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$@"
}
field() { sed -n "s/.*$1=\([0-9.e+-]*\).*/\1/p" <<<"$2"; }
results="$dir/results.txt"
: >"$results"
measure() {  # measure MODE: one of each measurement; MODE warm or cold
  local mode=$1 out s rss
  prep() { if [ "$mode" = cold ]; then drop; else cat "$dir"/dcp/*.distcp >/dev/null; fi; }
  prep; read -r s _ < <(timed bash -c "for f in $dir/dcp/*.distcp; do dd if=\$f of=/dev/null bs=8M status=none; done")
  echo "$mode plain_read $s 0" >>"$results"
  prep; read -r s _ < <(timed bash -c "for f in $dir/dcp/*.distcp; do dd if=\$f of=/dev/null bs=8M status=none & done; wait")
  echo "$mode plain_read_parallel $s 0" >>"$results"
  prep; out=$("$load" "$dir/dcp" 4)
  echo "$mode shardlight $(field seconds "$out") $(field peak_rss_kib "$out")" >>"$results"
  field destination_bytes "$out" >"$dir/destination_bytes"
  prep; read -r s _ < <(timed bash -c "cat $dir/dcp/*.distcp | dd of=$dir/copy.bin bs=8M iflag=fullblock conv=fsync status=none")
  rm -f "$dir/copy.bin"
  echo "$mode plain_copy $s 0" >>"$results"
  prep; read -r s rss < <(timed "$ckpt" --world_size=4 import "$dir/dcp" "$dir/imported")
  rm -rf "$dir/imported"
  echo "$mode ckpt_import $s $rss" >>"$results"
  prep; out=$(torchrun4 tools/bench/dcp_load_bench_peer.py "$dir/dcp" 2>"$dir/peer.log") ||
    { cat "$dir/peer.log"; echo "dcp_load_bench: dcp.load failed" >&2; exit 1; }
  echo "$mode dcp_load $(field seconds "$out") $(field peak_rss_kib "$out")" >>"$results"
}
loadavg_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 0; r < rounds; ++r)); do
  measure warm
  [ "$can_drop" = 1 ] && measure cold
done
/usr/bin/python3 - "$results" "$bytes" "$(cat "$dir/destination_bytes")" "$can_drop" "$loadavg_before" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
data, dest = int(sys.argv[2]), int(sys.argv[3])
gib = data / 2**30
print(f"DCP checkpoint: {gib:.3f} GiB of .distcp data, destinations {dest / 2**30:.3f} GiB on 4 ranks; "
      f"load average {sys.argv[5]} before, {sys.argv[6]} after (2 cores shared: noisy)")
if sys.argv[4] != "1":
    print("page cache: cannot be dropped by this user; warm only")
for mode in ("warm", "cold"):
    got = {}
    for m, name, s, rss in rows:
        if m == mode:
            got.setdefault(name, []).append((float(s), int(rss)))
    if not got:
        continue
    rate = {n: statistics.median(gib / s for s, _ in v) for n, v in got.items()}
    rate["plain_io"] = max(rate["plain_read"], rate["plain_read_parallel"])
    print(f"\n{mode} page cache, {len(got['plain_read'])} rounds: median GiB/s (min..max)")
    print("| what | GiB/s | vs plain I/O | vs dcp.load | peak RSS MiB |")
    print("|---|---|---|---|---|")
    base = {"shardlight": "plain_io", "dcp_load": "plain_io", "ckpt_import": "plain_copy"}
    for n in ("plain_read", "plain_read_parallel", "shardlight", "dcp_load", "plain_copy", "ckpt_import"):
        v = got[n]
        lo, hi = min(gib / s for s, _ in v), max(gib / s for s, _ in v)
        vs_io = f"{rate[n] / rate[base[n]]:.2f}x {base[n]}" if n in base else "-"
        vs_dcp = f"{rate[n] / rate['dcp_load']:.2f}x" if n == "shardlight" else "-"
        rss = max(r for _, r in v) / 1024
        print(f"| {n} | {rate[n]:.2f} ({lo:.2f}..{hi:.2f}) | {vs_io} | {vs_dcp} | {f'{rss:.0f}' if rss else '-'} |")
print("\nplain_io: the faster plain read; shardlight: one process, 4 thread-ranks (peak RSS of the process);"
      " dcp.load: 4 processes (peak RSS summed); ckpt import (read + write + fsync): one process, whole run"
      " (start-up included), against plain_copy (read + write + fsync)")
PY
