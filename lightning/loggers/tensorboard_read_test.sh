#!/usr/bin/env bash
# shardlight's TensorBoard event file, read by the real tensorboard 2.21.0
# (pinned in the torch 2.x venv by tools/setup_torch2.sh): the scalars of a
# 3-rank Trainer.Fit equal its CSV log. The torch 2.x leg; skips on 1.13.
set -u
fit="$1"; read="$2"
# shellcheck source=/dev/null
source "$3"  # LIBTORCH_PYTHON, LIBTORCH_VERSION, LIBTORCH_PREFIX
if [ -z "$LIBTORCH_PYTHON" ] || [ "${LIBTORCH_VERSION%%.*}" -lt 2 ]; then
  echo "SKIP: torch ${LIBTORCH_VERSION} (${LIBTORCH_PYTHON:-no Python}): tensorboard 2.21.0 is pinned in the torch 2.x venv only (the --config=torch2 leg)"
  exit 0
fi
dir="${TEST_TMPDIR:-/tmp}/tb_logs"
rm -rf "$dir"
"$fit" "$dir" || { echo "FAIL: logged_fit"; exit 1; }
ls "$dir"/events.out.tfevents.* >/dev/null || { echo "FAIL: no event file in $dir"; exit 1; }
"$LIBTORCH_PYTHON" "$read" "$dir"
