#!/usr/bin/env bash
# shardlight's metrics against the real torchmetrics 1.9.0 (pinned in the
# torch 2.x venv by tools/setup_torch2.sh) on data with ties, absent classes,
# NaNs and ignored tokens, at 1-4 thread-ranks with uneven splits and an
# empty rank. The torch 2.x leg; skips on 1.13, saying why.
set -u
cases="$1"; compare="$2"
# shellcheck source=/dev/null
source "$3"  # LIBTORCH_PYTHON, LIBTORCH_VERSION, LIBTORCH_PREFIX
if [ -z "$LIBTORCH_PYTHON" ] || [ "${LIBTORCH_VERSION%%.*}" -lt 2 ]; then
  echo "SKIP: torch ${LIBTORCH_VERSION} (${LIBTORCH_PYTHON:-no Python}): torchmetrics 1.9.0 is pinned in the torch 2.x venv only (the --config=torch2 leg)"
  exit 0
fi
out="${TEST_TMPDIR:-/tmp}/torchmetrics_cases.json"
"$cases" "$out" || { echo "FAIL: torchmetrics_cases"; exit 1; }
"$LIBTORCH_PYTHON" "$compare" "$out"
