#!/usr/bin/env bash
# PyTorch's torch.distributed.checkpoint (DCP) and shardlight's checkpoint on
# the same work, the same disk, in one run, alternating (which side goes first
# flips every round, so noise hits both): torchrun W=4 processes (--world) over Gloo on
# CPU for both, the workload of dcp_compare_peer.py / dcp_compare_rank.cc.
# Figures: save, load (page cache kept and dropped), resharding load W -> W-1,
# async save's blocking time and total; beside them the baselines from the
# same job (plain write+fsync, plain read, pread + CRC32C, one copy into
# resident memory). Prints every figure and its ratio, then writes the table
# (Markdown) and charts (SVG) into the benchmark report with checkpoint_report.
#
#   bash tools/bench/dcp_compare.sh [--out=DIR] [--dir=SCRATCH] [--rounds=N] [--repeats=R]
#        [--workloads=size:0.1,size:0.5,size:2,count:1000,count:10000,count:100000] [--dcp_threads=T]
#        [--world=W]   (default 4; the resharding load runs at W-1; --world=16 --workloads=count:100000
#                       --rounds=1 --repeats=1 is the scale run)
#
# Needs the torch 2.x environment of tools/setup.sh --torch2 (Python torch for
# DCP; shardlight is built against the same LibTorch, -c opt --config=torch2).
# The defaults take ~30 minutes on a 2-core machine; --workloads=size:0.1,count:1000
# --rounds=1 is a quick look. Scratch space: about 4x the largest workload.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=/tmp/shardlight_dcp_compare
scratch=/var/tmp/shardlight_dcp_compare
rounds=2
repeats=2
workloads=size:0.1,size:0.5,size:2,count:1000,count:10000,count:100000
dcp_threads=1
world=4
for arg in "$@"; do
  case "$arg" in
    --out=*) out=${arg#--out=} ;;
    --dir=*) scratch=${arg#--dir=} ;;
    --rounds=*) rounds=${arg#--rounds=} ;;
    --repeats=*) repeats=${arg#--repeats=} ;;
    --workloads=*) workloads=${arg#--workloads=} ;;
    --dcp_threads=*) dcp_threads=${arg#--dcp_threads=} ;;
    --world=*) world=${arg#--world=} ;;
    *) echo "dcp_compare: unknown argument '$arg' (see the comment at the top of $0)" >&2; exit 2 ;;
  esac
done
for n in "$rounds" "$repeats" "$dcp_threads"; do
  [[ "$n" =~ ^[1-9][0-9]?$ ]] || { echo "dcp_compare: --rounds, --repeats and --dcp_threads take 1..99" >&2; exit 2; }
done
[[ "$world" =~ ^[0-9]+$ ]] && ((world >= 2 && world <= 64)) || { echo "dcp_compare: --world takes 2..64" >&2; exit 2; }
torch_version=$(sed -n 's/^torch_version=\([0-9.]*\).*/\1/p' tools/setup_torch2.sh)
venv="${SHARDLIGHT_TORCH2_VENV:-$HOME/.cache/shardlight/torch-$torch_version}"
[ -x "$venv/bin/torchrun" ] || { echo "dcp_compare: no torch $torch_version at $venv: run bash tools/setup.sh --torch2" >&2; exit 2; }
echo "dcp_compare: building shardlight's side (-c opt --config=torch2)" >&2
bazel build -c opt --config=torch2 //tools/bench:dcp_compare_rank //tools/bench:checkpoint_report >&2
bin=$(bazel info -c opt --config=torch2 bazel-bin 2>/dev/null)
rank_bin=$(mktemp -d)/dcp_compare_rank
cp "$bin/tools/bench/dcp_compare_rank" "$rank_bin"  # a later build cannot change it mid-run
report_bin="$bin/tools/bench/checkpoint_report"
mkdir -p "$out" "$scratch"
results="$out/dcp_compare.tsv"
log="$out/dcp_compare.log"
: >"$log"
: >"$out/bytes.txt"
printf "workload\tsystem\tmetric\tseconds\n" >"$results"

port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# run_side SIDE W PHASE WORKLOAD: one torchrun job; its RESULT lines go to the table.
run_side() {
  local side=$1 w=$2 phase=$3 workload=$4 cmd
  if [ "$side" = dcp ]; then
    cmd=(tools/bench/dcp_compare_peer.py --threads="$dcp_threads")
  else
    cmd=(--no-python "$rank_bin")
  fi
  local text
  if ! text=$(OMP_NUM_THREADS=1 "$venv/bin/torchrun" --nnodes=1 --nproc_per_node="$w" --rdzv_backend=c10d \
      --rdzv_endpoint="127.0.0.1:$(port)" --rdzv_id="cmp$RANDOM" "${cmd[@]}" --phase="$phase" \
      --workload="$workload" --dir="$scratch/$workload" --repeats="$repeats" 2>&1); then
    echo "$text" >>"$log"
    echo "dcp_compare: $side $phase $workload failed (log: $log):" >&2
    tail -5 <<<"$text" >&2
    exit 1
  fi
  echo "$text" >>"$log"
  awk -v wl="$workload" '$1 == "RESULT" { printf "%s\t%s\t%s\t%s\n", wl, $2, $3, $4 }' <<<"$text" >>"$results"
  sed -n 's/^BYTES \([0-9]*\)$/\1/p' <<<"$text" | head -1
}

IFS=, read -r -a list <<<"$workloads"
for workload in "${list[@]}"; do
  rm -rf "${scratch:?}/$workload"
  mkdir -p "$scratch/$workload"
  for ((round = 1; round <= rounds; round++)); do
    if ((round % 2)); then order=(dcp shardlight); else order=(shardlight dcp); fi
    for phase in w4 w3; do
      w=$world; [ "$phase" = w3 ] && w=$((world - 1))
      for side in "${order[@]}"; do
        echo "dcp_compare: $workload round $round: $side $phase" >&2
        bytes=$(run_side "$side" "$w" "$phase" "$workload")
        if [ -n "$bytes" ]; then
          prev=$(sed -n "s/^bytes $workload //p" "$out/bytes.txt" 2>/dev/null | head -1)
          [ -z "$prev" ] || [ "$prev" = "$bytes" ] ||
            { echo "dcp_compare: the two sides built different workloads ($prev vs $bytes bytes)" >&2; exit 1; }
          [ -n "$prev" ] || echo "bytes $workload $bytes" >>"$out/bytes.txt"
        fi
      done
    done
  done
  rm -rf "${scratch:?}/$workload"
done

# Each round's ratio, then the best of every round per figure, each row with
# its ratios.
awk -f tools/bench/dcp_compare_rounds.awk "$results" >&2
"$report_bin" --compare="$results" --compare_bytes="$out/bytes.txt" --compare_threads="$dcp_threads" \
  --compare_world="$world" --out="$out"
rm -f "$out/bytes.txt"
echo "dcp_compare: table and charts in $out (checkpoint_report.md, dcp_compare_*.svg); raw figures $results" >&2
