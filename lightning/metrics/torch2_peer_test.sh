#!/usr/bin/env bash
# A shardlight binary writes OUT, then a Python check runs on it with the real
# Python peer that tools/setup_torch2.sh pins in the torch 2.x venv (PEER
# names it for the skip line). The torch 2.x leg; skips on 1.13, saying why.
# Usage: torch2_peer_test.sh BINARY CHECK.py PEER_SH PEER OUT_NAME
set -u
binary="$1"; check="$2"; peer="$4"
# shellcheck source=/dev/null
source "$3"  # LIBTORCH_PYTHON, LIBTORCH_VERSION, LIBTORCH_PREFIX
if [ -z "$LIBTORCH_PYTHON" ] || [ "${LIBTORCH_VERSION%%.*}" -lt 2 ]; then
  echo "SKIP: torch ${LIBTORCH_VERSION} (${LIBTORCH_PYTHON:-no Python}): $peer is pinned in the torch 2.x venv only (the --config=torch2 leg)"
  exit 0
fi
out="${TEST_TMPDIR:-/tmp}/$5"
rm -rf "$out"
"$binary" "$out" || { echo "FAIL: $binary $out"; exit 1; }
"$LIBTORCH_PYTHON" "$check" "$out"
