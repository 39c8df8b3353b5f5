#!/usr/bin/env bash
# The GPU checks, on a machine with an NVIDIA GPU: builds against the pinned
# CUDA LibTorch 2.x (tools/setup.sh --torch2, --config=torch2) and runs what
# skips everywhere else: NCCL allreduce and allgather, a ShardedTensor on
# "rank:0/cuda:0" shards, a checkpoint round trip from CUDA tensors
# (//lightning/cluster:nccl_test), then the main job with --device=cuda.
# Under 5 minutes on a warm disk cache. Usage: bash tools/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "gpu_check: nvidia-smi not found"
bash tools/setup.sh --torch2
start=$(date +%s)
bazel build --config=ci --config=torch2 //lightning/cluster:nccl_test //tools/train
# The test binary itself: its skips say why, and a skip here is a failure.
out=$(bazel-bin/lightning/cluster/nccl_test 2>&1) || { echo "$out"; echo "gpu_check: FAIL (nccl_test)"; exit 1; }
echo "$out"
if grep -q "SKIPPED" <<<"$out"; then
  echo "gpu_check: FAIL: the GPU checks skipped on this machine (see the reasons above)"
  exit 1
fi
# The main job on one GPU (a one-process torchrun job, NCCL, CUDA shards).
# shellcheck source=/dev/null
source "$(bazel info --config=torch2 output_base)/external/libtorch/peer.sh"  # LIBTORCH_TORCHRUN
torchrun=$LIBTORCH_TORCHRUN
"$torchrun" --standalone --nproc_per_node=1 --no_python bazel-bin/tools/train --device=cuda --steps=4 --seed=3 \
  | tee /dev/stderr | grep -q "final state digest" || { echo "gpu_check: FAIL (train --device=cuda)"; exit 1; }
echo "gpu_check: PASS in $(($(date +%s) - start)) s"
