#!/usr/bin/env bash
# Installs the pinned LibTorch 2.x: PyPI's torch wheel (a complete LibTorch:
# torch/include, torch/lib, torch/share/cmake; on x86_64 a CUDA build whose CUDA
# libraries come as nvidia-* wheels, and which runs on a CPU-only machine) into
# a virtual environment outside the checkout, keyed by the pinned version, so
# every clone on this machine (and CI's fresh clone) reuses it. Idempotent: a
# complete environment is only checked. `bazel ... --config=torch2` builds
# against it through the link $venv/libtorch (see README.md, "Which LibTorch").
# Called by `tools/setup.sh --torch2`; Debian's python3-torch (1.13) is untouched.
set -euo pipefail

torch_version=2.15.0  # the newest torch on PyPI (2026-10); see tools/bazel/README.md
numpy_version=2.3.5   # torch.Tensor.numpy() in the interop tests' Python side
lightning_version=2.6.6  # pytorch-lightning: the real peer of tests/interop/lightning2_test.sh
# pytorch-lightning's dependencies, each pinned at what pip resolved for it next
# to torch $torch_version (2026-12); aiohttp and friends come with fsspec[http].
lightning_deps=(lightning-utilities==0.15.3 torchmetrics==1.9.0 packaging==26.4 PyYAML==6.0.4 tqdm==4.70.1
  aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 attrs==26.1.0 frozenlist==1.8.0 idna==3.20
  multidict==7.2.1 propcache==0.5.4 yarl==1.25.1)
# The S3 peers of the checkpoint tests (issue 48): boto3 lists and reads what
# shardlight wrote to a bucket; s3fs is DCP's fsspec path to S3. Each pinned at
# what pip resolved next to s3fs $s3fs_version (2026-12).
boto3_version=1.43.117
s3fs_version=2026.9.0
s3_deps=("boto3==$boto3_version" "s3fs==$s3fs_version" botocore==1.43.117 aiobotocore==3.10.0 s3transfer==0.19.3
  jmespath==1.1.0 python-dateutil==2.9.0.post0 six==1.17.0 urllib3==2.8.0 wrapt==2.5.2)
# tensorboard: the real reader of the event files shardlight writes
# (//lightning/loggers:tensorboard_read_test); its dependencies as pip resolved
# them next to torch $torch_version (2026-12).
tensorboard_version=2.21.0
tensorboard_deps=(absl-py==2.5.1 grpcio==1.85.3 markdown==3.11.3 pillow==13.0.0 protobuf==7.36.2
  tensorboard-data-server==0.7.2 werkzeug==3.1.9)
# torchtitan: its own CheckpointManager writes and reads the checkpoint of
# //tests/interop:torchtitan_test. Installed without its dependency set
# (datasets, tokenizers, wandb, safetensors, ...: none of them imported by
# CheckpointManager, its optimizer and LR scheduler containers or its data
# loader); what those imports do need is pinned beside it.
torchtitan_version=0.3.0
torchtitan_deps=(torchdata==0.11.0 spmd_types==0.2.3 tyro==1.0.16 docstring-parser==0.18.0 typeguard==4.6.0)
venv="${SHARDLIGHT_TORCH2_VENV:-$HOME/.cache/shardlight/torch-$torch_version}"
python=/usr/bin/python3  # Debian's: python3-venv is in tools/setup.sh's list

check() {
  [ -x "$venv/bin/python" ] && [ -x "$venv/bin/torchrun" ] && [ -e "$venv/libtorch/include/ATen/ATen.h" ] &&
    "$venv/bin/python" - "$torch_version" "$numpy_version" "$lightning_version" "$boto3_version" "$s3fs_version" "$tensorboard_version" "$torchtitan_version" <<'PY' 2>/dev/null
import sys, importlib.metadata, numpy, torch, torch.distributed as dist, pytorch_lightning, boto3, s3fs, tensorboard
import torchtitan.components.checkpoint, torchtitan.components.dataloader, torchtitan.components.optimizer
assert torch.__version__.split("+")[0] == sys.argv[1], torch.__version__
assert numpy.__version__ == sys.argv[2], numpy.__version__
assert pytorch_lightning.__version__ == sys.argv[3], pytorch_lightning.__version__
assert boto3.__version__ == sys.argv[4], boto3.__version__
assert s3fs.__version__ == sys.argv[5], s3fs.__version__
assert tensorboard.__version__ == sys.argv[6], tensorboard.__version__
assert importlib.metadata.version("torchtitan") == sys.argv[7], importlib.metadata.version("torchtitan")
assert dist.is_available() and dist.is_gloo_available()
PY
}

if check; then
  echo "setup: torch $torch_version (numpy $numpy_version, pytorch-lightning $lightning_version) present in $venv"
  exit 0
fi

echo "setup: installing torch==$torch_version and pytorch-lightning==$lightning_version into $venv (the CUDA wheel and its nvidia-* wheels: several GB, once)"
mkdir -p "$(dirname "$venv")"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "torch==$torch_version" "numpy==$numpy_version" \
  "pytorch-lightning==$lightning_version" "${lightning_deps[@]}" "${s3_deps[@]}" "tensorboard==$tensorboard_version" "${tensorboard_deps[@]}"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "torchtitan==$torchtitan_version" "${torchtitan_deps[@]}"
site=$("$venv/bin/python" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)
ln -sfn "$site" "$venv/libtorch"
check || { echo "setup: torch $torch_version in $venv does not import with Gloo (or pytorch-lightning $lightning_version or torchtitan $torchtitan_version does not import)" >&2; exit 1; }
echo "setup: torch $torch_version ready; LibTorch at $venv/libtorch"
