#!/usr/bin/env bash
# Per-rank peak RSS of per-unit FSDP (shardlight) beside PyTorch FSDP2 on the
# same model, W processes under torchrun each, in one run, beside the ideal
# (training state / W + one unit unsharded), and each rank's persistent part
# (resident after the last step, above its start) beside state / W. Not a
# test: it prints figures.
# Usage: bash tools/bench/fsdp_memory_bench.sh [W | scaling] [-- --width=4096 --units=8 --steps=3]
#   bash tools/bench/fsdp_memory_bench.sh 4 -- --model=gpt --batch=4 --steps=3
# "scaling" runs W = 1, 2, 3, 4 and adds a table of the persistent part per W.
# Both sides inherit the environment: MALLOC_MMAP_THRESHOLD_=131072 measures
# live memory rather than what glibc's dynamic threshold keeps in the heap.
# Needs the torch 2.x venv (tools/setup.sh --torch2) for FSDP2 and its torchrun.
set -euo pipefail
cd "$(dirname "$0")/../.."
worlds=${1:-4}
[ "$worlds" = scaling ] && worlds="1 2 3 4"
shift || true
[ "${1:-}" = "--" ] && shift
venv=${SHARDLIGHT_TORCH2_VENV:-$HOME/.cache/shardlight/torch-2.15.0}
bazel build -c "${COMPILATION_MODE:-opt}" --config=torch2 //tools/bench:fsdp_memory_bench >/dev/null 2>&1
bench=$(realpath bazel-bin/tools/bench/fsdp_memory_bench)
port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
peer_args=()
for a in "$@"; do case "$a" in --width=* | --units=* | --batch=* | --steps=* | --model=* | --gpt_*=*) peer_args+=("$a") ;; esac; done
all=""
for w in $worlds; do
  tr_flags=(--nnodes=1 --rdzv_backend=c10d --nproc_per_node="$w")
  start=$(date +%s)
  ours=$("$venv/bin/torchrun" "${tr_flags[@]}" --rdzv_endpoint="127.0.0.1:$(port)" --no_python "$bench" --mode=process "$@" 2>&1 | grep '^fsdp_memory:')
  mid=$(date +%s)
  theirs=$("$venv/bin/torchrun" "${tr_flags[@]}" --rdzv_endpoint="127.0.0.1:$(port)" tools/bench/fsdp_memory_peer.py "${peer_args[@]}" 2>&1 | grep '^fsdp_memory:')
  echo "W=$w: shardlight $((mid - start)) s, PyTorch $(($(date +%s) - mid)) s (wall, both including start-up)"
  echo "$ours"
  echo "$theirs"
  all+="W=$w"$'\n'"$ours"$'\n'"$theirs"$'\n'
done
/usr/bin/python3 - "$all" <<'PY'
import re, sys
runs = re.split(r"^W=(\d+)$", sys.argv[1], flags=re.M)[1:]
pat = r"rank (\d+)/\d+ peak_rss_mib ([0-9.]+) \(at start ([0-9.]+)\)"
scaling = []
for w, text in zip(runs[0::2], runs[1::2]):
    ours = {int(m[0]): (float(m[1]), float(m[2]), float(m[3])) for m in re.findall(
        "shardlight \\S+ " + pat + r" state_mib .* persistent_mib ([0-9.-]+) ideal_persistent_mib", text)}
    theirs = {int(m[0]): (float(m[1]), float(m[2]), float(m[3])) for m in re.findall(
        "pytorch fsdp2 " + pat + r" persistent_mib ([0-9.-]+)", text)}
    ideal = float(re.search(r"ideal_mib ([0-9.]+)", text).group(1))
    state = float(re.search(r"state_mib ([0-9.]+)", text).group(1))
    print(f"\nW={w}: training state {state:.0f} MiB; ideal per rank above the process's start {ideal:.0f} MiB "
          f"(state / W + one unit's parameters and gradients); persistent ideal {state / int(w):.0f} MiB (state / W)")
    print("| rank | shardlight peak RSS (above start) MiB | PyTorch FSDP2 peak RSS (above start) MiB | peak ratio "
          "| above-start ratio | shardlight above start / ideal | persistent MiB shardlight / PyTorch / ideal |")
    print("|---|---|---|---|---|---|---|")
    nan = (float("nan"),) * 3
    for r in sorted(ours):
        (p, s, k), (tp, ts, tk) = ours[r], theirs.get(r, nan)
        print(f"| {r} | {p:.0f} ({p - s:.0f}) | {tp:.0f} ({tp - ts:.0f}) | {p / tp:.2f} | {(p - s) / (tp - ts):.2f} "
              f"| {(p - s) / ideal:.2f} | {k:.0f} / {tk:.0f} / {state / int(w):.0f} |")
    if ours:
        scaling.append((int(w), max(v[2] for v in ours.values()), max(v[2] for v in theirs.values()) if theirs else
                        float("nan"), state / int(w)))
if len(scaling) > 1:
    print("\nPersistent part (largest rank's resident memory after the last step, above its start) by W:")
    print("| W | shardlight MiB | x W | PyTorch FSDP2 MiB | x W | ideal state / W MiB |")
    print("|---|---|---|---|---|---|")
    for w, k, tk, ideal in scaling:
        print(f"| {w} | {k:.0f} | {k * w:.0f} | {tk:.0f} | {tk * w:.0f} | {ideal:.0f} |")
PY
