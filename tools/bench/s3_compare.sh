#!/usr/bin/env bash
# shardlight's checkpoints on S3 beside boto3's transfer manager and PyTorch
# DCP over fsspec/s3fs: the same bytes, the same server (a fresh SeaweedFS on
# loopback, tools/s3/with_seaweedfs.sh), the same run, torchrun W processes
# (--world, default 4) over Gloo on CPU for every side.
# Figures per workload: save and load (the same world size) of
#   shardlight  SaveCheckpoint / LoadCheckpoint at s3://bucket/... (s3_compare_rank.cc)
#   boto3       each rank's saved bytes as one object: upload_fileobj (multipart,
#               parts in parallel) / download_fileobj (ranged GETs in parallel)
#   dcp         dcp.save / dcp.load at s3://bucket/... through fsspec/s3fs
# (s3_compare_peer.py), then the throughput ratios: shardlight vs boto3
# (target >= 0.9) and vs dcp (target >= 2).
#
#   bash tools/bench/s3_compare.sh [--workloads=size:0.5,size:2,count:100000] [--repeats=R] [--world=W]
#        [--peers=boto3,dcp] [--rank=BIN] [--baseline=BIN]
#
# --peers picks the peers that run (DCP's load of 100k tensors alone takes
# ~30 min). --rank runs that s3_compare_rank binary instead of building one;
# --baseline runs a second one (another build, say the commit before a
# change) in the same run, against the same server, and prints its times
# and the ratio of the two: a same-run before/after on a noisy machine.
# Needs the torch 2.x environment of tools/setup.sh --torch2 (torch, boto3,
# s3fs) and SeaweedFS (tools/setup.sh). The defaults take ~1 h 45 min on a
# 2-core machine and want it idle; --workloads=size:0.5 --repeats=1 is a quick look.
set -euo pipefail
cd "$(dirname "$0")/../.."
workloads=size:0.5,size:2,count:100000
repeats=2
world=4
peers=boto3,dcp
rank_given=
baseline=
for arg in "$@"; do
  case "$arg" in
    --workloads=*) workloads=${arg#--workloads=} ;;
    --repeats=*) repeats=${arg#--repeats=} ;;
    --world=*) world=${arg#--world=} ;;
    --peers=*) peers=${arg#--peers=} ;;
    --rank=*) rank_given=${arg#--rank=} ;;
    --baseline=*) baseline=${arg#--baseline=} ;;
    *) echo "s3_compare: unknown argument '$arg' (see the comment at the top of $0)" >&2; exit 2 ;;
  esac
done
[[ "$repeats" =~ ^[1-9][0-9]?$ ]] || { echo "s3_compare: --repeats takes 1..99" >&2; exit 2; }
[[ "$world" =~ ^[0-9]+$ ]] && ((world >= 1 && world <= 64)) || { echo "s3_compare: --world takes 1..64" >&2; exit 2; }
torch_version=$(sed -n 's/^torch_version=\([0-9.]*\).*/\1/p' tools/setup_torch2.sh)
venv="${SHARDLIGHT_TORCH2_VENV:-$HOME/.cache/shardlight/torch-$torch_version}"
[ -x "$venv/bin/torchrun" ] || { echo "s3_compare: no torch $torch_version at $venv: run bash tools/setup.sh --torch2" >&2; exit 2; }
[[ "$peers" =~ ^(boto3|dcp)(,(boto3|dcp))?$ ]] || { echo "s3_compare: --peers takes boto3, dcp or boto3,dcp" >&2; exit 2; }
for b in "$rank_given" "$baseline"; do
  [ -z "$b" ] || [ -x "$b" ] || { echo "s3_compare: '$b' is not an executable s3_compare_rank" >&2; exit 2; }
done
rank_bin=$(mktemp -d)/s3_compare_rank
if [ -n "$rank_given" ]; then
  cp "$rank_given" "$rank_bin"
else
  echo "s3_compare: building shardlight's side (-c opt --config=torch2)" >&2
  bazel build -c opt --config=torch2 //tools/bench:s3_compare_rank >&2
  bin=$(bazel info -c opt --config=torch2 bazel-bin 2>/dev/null)
  cp "$bin/tools/bench/s3_compare_rank" "$rank_bin"  # a later build cannot change it mid-run
fi

export S3_COMPARE_VENV=$venv S3_COMPARE_RANK=$rank_bin S3_COMPARE_WORKLOADS=$workloads
export S3_COMPARE_REPEATS=$repeats S3_COMPARE_WORLD=$world S3_COMPARE_PEERS=$peers S3_COMPARE_BASELINE=$baseline
# Inside: the server is up, AWS_* and SHARDLIGHT_S3_BUCKET are set.
exec bash tools/s3/with_seaweedfs.sh bash -c '
set -euo pipefail
run() { "$S3_COMPARE_VENV/bin/torchrun" --nproc_per_node="$S3_COMPARE_WORLD" --master_addr=127.0.0.1 \
          --master_port=$((29600 + RANDOM % 300)) "$@"; }
IFS=, read -r -a list <<<"$S3_COMPARE_WORKLOADS"
n=0
for w in "${list[@]}"; do
  n=$((n + 1))
  echo "== $w (W=$S3_COMPARE_WORLD, best of $S3_COMPARE_REPEATS)"
  out=$(mktemp)
  if [ -n "$S3_COMPARE_BASELINE" ]; then
    run --no-python "$S3_COMPARE_BASELINE" --workload="$w" --dir="s3://$SHARDLIGHT_S3_BUCKET/b$n" \
        --repeats="$S3_COMPARE_REPEATS" | sed "s/^RESULT shardlight /RESULT baseline /" | tee -a "$out"
  fi
  run --no-python "$S3_COMPARE_RANK" --workload="$w" --dir="s3://$SHARDLIGHT_S3_BUCKET/w$n" --repeats="$S3_COMPARE_REPEATS" | tee -a "$out"
  run tools/bench/s3_compare_peer.py --workload="$w" --bucket="$SHARDLIGHT_S3_BUCKET" \
      --prefix="w$n" --repeats="$S3_COMPARE_REPEATS" --systems="$S3_COMPARE_PEERS" | tee -a "$out"
  awk -v w="$w" '"'"'
    /^BYTES/ { bytes = $2 }
    /^RESULT/ { t[$2 "." $3] = $4 }
    END {
      gib = bytes / 2^30
      split("save load", ops, " ")
      for (i = 1; i <= 2; i++) {
        op = ops[i]; sl = t["shardlight." op]; b = t["boto3." op]; d = t["dcp." op]; base = t["baseline." op]
        printf "%-14s %-5s shardlight %7.3f s (%6.3f GiB/s)", w, op, sl, gib / sl
        if (b != "") printf "  boto3 %7.3f s", b
        if (d != "") printf "  dcp %7.3f s", d
        if (b != "") printf "  ratio vs boto3 %.2fx (target >= 0.9)", b / sl
        if (d != "") printf "  vs dcp %.2fx (target >= 2)", d / sl
        if (base != "") printf "  baseline %7.3f s (%.2fx faster now)", base, base / sl
        printf "\n"
      }
    }'"'"' "$out"
  rm -f "$out"
done
'
