#!/usr/bin/env bash
# shardlight's Trainer against the real pytorch_lightning 2.6.6 Trainer (issue
# 46, item 7), on the --config=torch2 leg: the same Net, initial weights and
# data, accumulate_grad_batches 2, gradient clipping at norm 1.0, AdamW with a
# linear warm-up then cosine schedule stepped every optimizer step, validation
# every 2 optimizer steps: every step's loss and learning rate and every
# val_loss equal within fp32 relative 1e-6, and the two best steps by val_loss
# are the ones Lightning's ModelCheckpoint(monitor="val_loss", save_top_k=2)
# kept. Also at 2 simulated ranks (rows split over them).
run="$1"; peer="$2"
# shellcheck source=/dev/null
source "$3" # LIBTORCH_PYTHON, LIBTORCH_VERSION, LIBTORCH_PREFIX
if [ -z "$LIBTORCH_PYTHON" ] || [ "${LIBTORCH_VERSION%%.*}" -lt 2 ]; then
  echo "SKIP: torch ${LIBTORCH_VERSION:-?} (${LIBTORCH_PYTHON:-no python}): pytorch-lightning 2.6.6 needs torch >= 2.1 (the --config=torch2 leg)"
  exit 0
fi
fail() { echo "FAIL: $*"; exit 1; }
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
"$LIBTORCH_PYTHON" "$peer" lightning "$tmp/lightning.json" >"$tmp/lightning.log" 2>&1 \
  || { cat "$tmp/lightning.log"; fail "Lightning's Trainer.fit"; }
for w in 1 2; do
  "$run" "$w" >"$tmp/ours_$w.json" 2>"$tmp/ours_$w.log" || { cat "$tmp/ours_$w.log"; fail "trainer_parity_run $w"; }
  echo "--- shardlight at $w rank(s) against Lightning"
  "$LIBTORCH_PYTHON" "$peer" compare "$tmp/ours_$w.json" "$tmp/lightning.json" || fail "differs from Lightning at W=$w"
done
echo PASS
