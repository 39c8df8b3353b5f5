#!/usr/bin/env bash
# shardlight's Trainer against the real pytorch_lightning 2.6.6 Trainer (issue
# 46, item 7), on the --config=torch2 leg: the same Net, initial weights and
# data, accumulate_grad_batches 2, gradient clipping at norm 1.0, AdamW with a
# linear warm-up then cosine schedule stepped every optimizer step, validation
# every 2 optimizer steps: every step's loss and learning rate and every
# val_loss equal within fp32 relative 1e-6, and the two best steps by val_loss
# are the ones Lightning's ModelCheckpoint(monitor="val_loss", save_top_k=2)
# kept; our ModelCheckpoint(monitor="val_loss", save_top_k=2) has Lightning's
# best_k_models and leaves the same checkpoints on disk (Lightning's
# step=N.ckpt files and last.ckpt = our step directories and `latest`). Also
# at 2 simulated ranks (rows split over them).
run="$1"; peer="$2"
# shellcheck source=/dev/null
source "$3" # LIBTORCH_PYTHON, LIBTORCH_VERSION, LIBTORCH_PREFIX
if [ -z "$LIBTORCH_PYTHON" ] || [ "${LIBTORCH_VERSION%%.*}" -lt 2 ]; then
  echo "SKIP: torch ${LIBTORCH_VERSION:-?} (${LIBTORCH_PYTHON:-no python}): pytorch-lightning 2.6.6 needs torch >= 2.1 (the --config=torch2 leg)"
  exit 0
fi
fail() { echo "FAIL: $*"; exit 1; }
# bf16-mixed tolerance (relative, each step's loss and lr, each val_loss), by world size.
# W=1: both sides run the same ops through the same dispatcher (LibTorch 2.15's CPU autocast lists,
# from Python and from C++), so fp32's 1e-6 holds (measured: losses and lrs bit-equal, val_loss
# 1.3e-7). W=2: each rank's backward sums its rows' weight gradients in a bf16 matmul whose result is
# rounded to bf16 (8 significant bits) before the fp32 all-reduce, where Lightning rounds the whole
# batch's sum once: a difference of up to one bf16 unit, 2^-8 = 3.9e-3 relative, in a gradient, which
# AdamW's normalisation carries into the step's update; the bound is that unit (measured: 4.0e-4 on a
# loss, 6.5e-5 on a val_loss).
bf16_tolerance() { if [ "$1" = 1 ]; then echo 1e-6; else echo 3.9e-3; fi; }
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
"$LIBTORCH_PYTHON" "$peer" lightning "$tmp/lightning.json" >"$tmp/lightning.log" 2>&1 \
  || { cat "$tmp/lightning.log"; fail "Lightning's Trainer.fit"; }
for w in 1 2; do
  "$run" "$w" "$tmp/ours_ckpt_$w" >"$tmp/ours_$w.json" 2>"$tmp/ours_$w.log" || { cat "$tmp/ours_$w.log"; fail "trainer_parity_run $w"; }
  echo "--- shardlight at $w rank(s) against Lightning"
  "$LIBTORCH_PYTHON" "$peer" compare "$tmp/ours_$w.json" "$tmp/lightning.json" || fail "differs from Lightning at W=$w"
done
# precision="bf16-mixed": Lightning's MixedPrecision on CPU (torch.autocast("cpu", bfloat16) around
# training_step and validation_step) against TrainerOptions::precision "bf16-mixed" (the same CPU
# autocast from C++, lightning/autocast_compat.h). Tolerance: bf16_tolerance above.
"$LIBTORCH_PYTHON" "$peer" lightning "$tmp/lightning_bf16.json" bf16-mixed >"$tmp/lightning_bf16.log" 2>&1 \
  || { cat "$tmp/lightning_bf16.log"; fail "Lightning's Trainer.fit with precision=bf16-mixed"; }
for w in 1 2; do
  "$run" "$w" "$tmp/ours_bf16_ckpt_$w" bf16-mixed >"$tmp/ours_bf16_$w.json" 2>"$tmp/ours_bf16_$w.log" \
    || { cat "$tmp/ours_bf16_$w.log"; fail "trainer_parity_run $w bf16-mixed"; }
  echo "--- shardlight bf16-mixed at $w rank(s) against Lightning's"
  "$LIBTORCH_PYTHON" "$peer" compare "$tmp/ours_bf16_$w.json" "$tmp/lightning_bf16.json" "$(bf16_tolerance "$w")" \
    || fail "bf16-mixed differs from Lightning at W=$w"
done
echo PASS
