#!/usr/bin/env bash
# The GPU checks, on a machine with an NVIDIA GPU: builds against the pinned
# CUDA LibTorch 2.x (tools/setup.sh --torch2, --config=torch2) and runs what
# skips everywhere else: NCCL allreduce and allgather, a ShardedTensor on
# "rank:0/cuda:0" shards, a checkpoint round trip from CUDA tensors
# (//lightning/cluster:nccl_test), then the main job with --device=cuda.
# Under 5 minutes on a warm disk cache. Usage: bash tools/gpu_check.sh
#
# On a GPU machine that cannot build (no Bazel, no network) but has Python
# torch: bash tools/gpu_check.sh --prebuilt=DIR, where DIR holds nccl_test and
# train built elsewhere against the same torch version's LibTorch
# (--repo_env=SHARDLIGHT_LIBTORCH=<that wheel's torch/ folder>); they run on
# that machine's python3 torch libraries and its torchrun.
set -euo pipefail
cd "$(dirname "$0")/.."
prebuilt=
for arg in "$@"; do
  case "$arg" in
    --prebuilt=*) prebuilt=${arg#--prebuilt=} ;;
    *) echo "gpu_check: unknown argument '$arg' (see the comment at the top of $0)" >&2; exit 2 ;;
  esac
done
command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "gpu_check: nvidia-smi not found"
start=$(date +%s)
if [ -n "$prebuilt" ]; then
  nccl_test=$prebuilt/nccl_test train=$prebuilt/train
  torch_lib=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__) + "/lib")')
  # A test binary (fastbuild) links its libraries dynamically: DIR/lib.
  export LD_LIBRARY_PATH=$prebuilt/lib:$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  torchrun=$(command -v torchrun || echo "$(dirname "$(command -v python3)")/torchrun")
  echo "gpu_check: prebuilt binaries from $prebuilt on $(python3 -c 'import torch; print("torch", torch.__version__)') ($torch_lib)"
else
  bash tools/setup.sh --torch2
  bazel build --config=ci --config=torch2 //lightning/cluster:nccl_test //tools/train
  nccl_test=bazel-bin/lightning/cluster/nccl_test train=bazel-bin/tools/train
  # shellcheck source=/dev/null
  source "$(bazel info --config=torch2 output_base)/external/libtorch/peer.sh"  # LIBTORCH_TORCHRUN
  torchrun=$LIBTORCH_TORCHRUN
fi
# Both checks run whatever the first gives, so one device run says all it can;
# the verdict comes at the end.
failed=()
# The test binary itself: its skips say why, and a skip here is a failure.
if out=$("$nccl_test" 2>&1); then
  echo "$out"
  if grep -q "SKIPPED" <<<"$out"; then
    echo "gpu_check: the GPU checks skipped on this machine (see the reasons above)"
    failed+=("nccl_test skipped")
  fi
else
  echo "$out"
  failed+=("nccl_test")
fi
# The main job on one GPU (a one-process torchrun job, NCCL, CUDA shards).
train_log=$(mktemp)
trap 'rm -f "$train_log"' EXIT
"$torchrun" --standalone --nproc_per_node=1 --no_python "$train" --device=cuda --steps=4 --seed=3 \
  2>&1 | tee "$train_log" || true
grep -q "final state digest" "$train_log" || failed+=("train --device=cuda")
if [ ${#failed[@]} -gt 0 ]; then
  echo "gpu_check: FAIL (${failed[*]}) after $(($(date +%s) - start)) s"
  exit 1
fi
echo "gpu_check: PASS in $(($(date +%s) - start)) s"
