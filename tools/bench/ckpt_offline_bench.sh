#!/usr/bin/env bash
# ckpt consolidate, reshard and diff on a multi-GiB checkpoint against the
# disk's sequential bandwidth measured in the same run: the baseline for
# consolidate and reshard is a plain copy of the same data files into one file
# (cat | dd, fsync), for diff two plain reads of them; each tool run also
# reports its peak RSS.
# Usage: bash tools/bench/ckpt_offline_bench.sh [DIR] [GIB]
# (COMPILATION_MODE=fastbuild reuses a debug build instead of building -c opt.)
# Page cache: dropped before every measurement when this user may
# (/proc/sys/vm/drop_caches), else every measurement starts warm (said so).
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-/var/tmp/shardlight-offline-bench}
gib=${2:-2}
bazel build -c "${COMPILATION_MODE:-opt}" //tools/ckpt //tools/ckpt:make_test_checkpoint >/dev/null 2>&1
ckpt=$(realpath bazel-bin/tools/ckpt/ckpt)
maker=$(realpath bazel-bin/tools/ckpt/make_test_checkpoint)
rm -rf "$dir" && mkdir -p "$dir"

cache="cold (caches dropped)"
drop() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || cache="warm (cannot drop caches)"; }
now() { date +%s.%N; }
# Runs a command; prints "seconds peak_rss_mib".
timed() {
  /usr/bin/python3 -c '
import resource, subprocess, sys, time
t = time.time()
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
if rc: sys.exit(rc)
print(f"{time.time() - t:.3f}", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)' "$@"
}

"$maker" big "$dir/ckpt" $((gib * 1024))
bytes=$(cat "$dir"/ckpt/data-*.safetensors | wc -c)

drop; read -r copy_s _ < <(timed bash -c "cat $dir/ckpt/data-*.safetensors | dd of=$dir/plain.bin bs=16M iflag=fullblock conv=fsync status=none")
rm -f "$dir/plain.bin"
drop; read -r cons_s cons_rss < <(timed "$ckpt" --progress=never consolidate "$dir/ckpt" "$dir/all.safetensors")
rm -f "$dir/all.safetensors"
drop; read -r resh_s resh_rss < <(timed "$ckpt" --world_size=2 reshard "$dir/ckpt" "$dir/r2")
rm -rf "$dir/r2"
drop; read -r read_s _ < <(timed bash -c "cat $dir/ckpt/data-*.safetensors $dir/ckpt/data-*.safetensors >/dev/null")
drop; read -r diff_s diff_rss < <(timed "$ckpt" diff "$dir/ckpt" "$dir/ckpt")
read -r base_s base_rss < <(timed "$ckpt" inspect "$dir/ckpt")

/usr/bin/python3 - "$bytes" "$copy_s" "$cons_s" "$cons_rss" "$read_s" "$diff_s" "$diff_rss" "$base_rss" "$resh_s" "$resh_rss" "$cache" <<'PY'
import sys
b, copy_s, cons_s, cons_rss, read_s, diff_s, diff_rss, base_rss, resh_s, resh_rss = map(float, sys.argv[1:11])
gib = b / 2**30
print(f"checkpoint: {gib:.2f} GiB of data; page cache: {sys.argv[11]}; baseline RSS (inspect) {base_rss:.0f} MiB")
print("| command | GiB/s | plain I/O GiB/s | ratio | peak RSS MiB (over baseline) |")
print("|---|---|---|---|---|")
print(f"| consolidate (read + write) | {gib / cons_s:.2f} | {gib / copy_s:.2f} (cat, fsync) | {copy_s / cons_s:.2f} | {cons_rss:.0f} (+{cons_rss - base_rss:.0f}) |")
print(f"| reshard 3 -> 2 ranks (read + write) | {gib / resh_s:.2f} | {gib / copy_s:.2f} (cat, fsync) | {copy_s / resh_s:.2f} | {resh_rss:.0f} (+{resh_rss - base_rss:.0f}) |")
print(f"| diff A A (read twice) | {2 * gib / diff_s:.2f} | {2 * gib / read_s:.2f} (cat) | {read_s / diff_s:.2f} | {diff_rss:.0f} (+{diff_rss - base_rss:.0f}) |")
PY
rm -rf "$dir"
