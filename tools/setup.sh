#!/usr/bin/env bash
# Installs every Debian package that shardlight's build, tests and tools need;
# the pinned SeaweedFS S3 server for the S3 tests (tools/setup_seaweedfs.sh);
# with --torch2 also the pinned LibTorch 2.x (tools/setup_torch2.sh).
# Idempotent: when everything is present it only checks and exits in seconds.
set -euo pipefail

torch2=0
for arg in "$@"; do
  case "$arg" in
    --torch2) torch2=1 ;;
    *) echo "setup: unknown argument '$arg' (usage: tools/setup.sh [--torch2])" >&2; exit 2 ;;
  esac
done

packages=(
  bazel-bootstrap        # Bazel 4.2.3 (offline; see tools/bazel/README.md)
  g++                    # the C++ toolchain Bazel auto-configures
  libtorch-dev           # LibTorch 1.13.1 CPU with c10d and Gloo
  libgloo-dev            # Gloo headers/lib used by ProcessGroupGloo
  libabsl-dev            # Abseil 20220623 (status, strings, flags)
  googletest             # gtest/gmock sources and static libs
  libgtest-dev
  libgmock-dev
  nlohmann-json3-dev     # JSON for checkpoint indexes
  libcurl4-openssl-dev   # HTTP for the S3 client (sharded/checkpoint/storage/s3)
  libssl-dev             # SHA-256 and HMAC for its SigV4 signing
  curl                   # tools/s3/with_seaweedfs.sh's readiness check
  python3-venv           # the torch 2.x and SeaweedFS virtual environments
  zlib1g-dev             # inflate of deflated torch.save records (sharded/checkpoint/interop/pytorch:zip_reader)
  libbenchmark-dev       # benchmarks
  python3-torch          # torchrun (real-process tests, README) and Python PyTorch (interop tests)
  openmpi-bin            # mpirun (real-process tests)
  iproute2               # ip netns + veth (the two-host test)
  procps                 # pgrep (the kill tests find a worker by rank)
  stress-ng              # loads the CPUs for tools/flake_hunt.sh and the loaded kill-test runs
  clang-14               # libFuzzer targets (tools/fuzz.sh)
  libclang-rt-14-dev     # libFuzzer and the sanitizer runtimes for clang-14
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# What comes from PyPI, each into a virtual environment of its own outside
# the checkout, after the Debian packages (python3-venv) are in.
finish() {
  bash "$(dirname "$0")/setup_seaweedfs.sh"
  [ $torch2 -eq 0 ] || exec bash "$(dirname "$0")/setup_torch2.sh"
  exit 0
}

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  finish
fi

echo "setup: installing ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "setup: these packages are missing: ${missing[*]}" >&2
  echo "setup: run as root or with passwordless sudo:  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq || "${sudo[@]}" apt-get update
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
finish
