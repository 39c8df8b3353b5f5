#!/usr/bin/env bash
# Per-rank peak RSS of per-unit FSDP (shardlight) beside PyTorch FSDP2 on the
# same model, W processes under torchrun each, in one run, beside the ideal
# (training state / W + one unit unsharded). Not a test: it prints figures.
# Usage: bash tools/bench/fsdp_memory_bench.sh [W] [-- --width=4096 --units=8 --steps=3]
# Needs the torch 2.x venv (tools/setup.sh --torch2) for FSDP2 and its torchrun.
set -euo pipefail
cd "$(dirname "$0")/../.."
w=${1:-4}
shift || true
[ "${1:-}" = "--" ] && shift
venv=${SHARDLIGHT_TORCH2_VENV:-$HOME/.cache/shardlight/torch-2.15.0}
bazel build -c "${COMPILATION_MODE:-opt}" --config=torch2 //tools/bench:fsdp_memory_bench >/dev/null 2>&1
bench=$(realpath bazel-bin/tools/bench/fsdp_memory_bench)
port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
tr_flags=(--nnodes=1 --rdzv_backend=c10d --nproc_per_node="$w")
ours=$("$venv/bin/torchrun" "${tr_flags[@]}" --rdzv_endpoint="127.0.0.1:$(port)" --no_python "$bench" --mode=process "$@" 2>&1 | grep '^fsdp_memory:')
peer_args=()
for a in "$@"; do case "$a" in --width=* | --units=* | --batch=* | --steps=*) peer_args+=("$a") ;; esac; done
theirs=$("$venv/bin/torchrun" "${tr_flags[@]}" --rdzv_endpoint="127.0.0.1:$(port)" tools/bench/fsdp_memory_peer.py "${peer_args[@]}" 2>&1 | grep '^fsdp_memory:')
echo "$ours"
echo "$theirs"
/usr/bin/python3 - "$ours" "$theirs" <<'PY'
import re, sys
pat = r"rank (\d+)/\d+ peak_rss_mib ([0-9.]+) \(at start ([0-9.]+)\)"
ours = {int(r): (float(p), float(s)) for r, p, s in re.findall("shardlight \\S+ " + pat, sys.argv[1])}
theirs = {int(r): (float(p), float(s)) for r, p, s in re.findall("pytorch fsdp2 " + pat, sys.argv[2])}
ideal = float(re.search(r"ideal_mib ([0-9.]+)", sys.argv[1]).group(1))
state = float(re.search(r"state_mib ([0-9.]+)", sys.argv[1]).group(1))
print(f"training state {state:.0f} MiB; ideal per rank above the process's start {ideal:.0f} MiB (state / W + one unit's parameters and gradients)")
print("| rank | shardlight peak RSS (above start) MiB | PyTorch FSDP2 peak RSS (above start) MiB | peak ratio | above-start ratio | shardlight above start / ideal |")
print("|---|---|---|---|---|---|")
for r in sorted(ours):
    (p, s), (tp, ts) = ours[r], theirs.get(r, (float("nan"), float("nan")))
    print(f"| {r} | {p:.0f} ({p - s:.0f}) | {tp:.0f} ({tp - ts:.0f}) | {p / tp:.2f} | {(p - s) / (tp - ts):.2f} | {(p - s) / ideal:.2f} |")
PY
