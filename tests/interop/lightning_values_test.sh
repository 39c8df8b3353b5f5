#!/usr/bin/env bash
# Everything a Lightning resume needs survives .ckpt -> ckpt import ->
# shardlight (2 ranks) -> ckpt export -> .ckpt, against the real
# pytorch_lightning 2.x (lightning2_peer.py, the --config=torch2 leg):
# Trainer.fit of a module with Adam and a per-step StepLR writes the .ckpt;
# the import carries its non-tensor entries (global_step, epoch, loops,
# lr_schedulers, hyper_parameters, optimizer param_groups, callback state) as
# values and records their nesting; torch.load(weights_only=True) of the
# export is the .ckpt's tree (keys in order, values, tensors bit for bit); and
# Trainer.fit(ckpt_path=) resumes from the export exactly as from the .ckpt
# itself (step, epoch, lr, scheduler, Adam state, and the weights after 4
# more steps).
ckpt="$1"; peer="$2"
# shellcheck source=/dev/null
source "$3" # LIBTORCH_PYTHON, LIBTORCH_VERSION, LIBTORCH_PREFIX
if [ -n "$LIBTORCH_PYTHON" ] && [ "${LIBTORCH_VERSION%%.*}" -lt 2 ]; then
  echo "SKIP: torch $LIBTORCH_VERSION ($LIBTORCH_PYTHON): pytorch-lightning 2.6.6 needs torch >= 2.1 (the --config=torch2 leg)"
  exit 0
fi
source "$(dirname "$0")/dcp_lib.sh" "$3" lv || { echo "FAIL: cannot source dcp_lib.sh"; exit 1; }
py="$LIBTORCH_PYTHON"
"$py" -c 'import pytorch_lightning as pl; assert pl.__version__ == "2.6.6", pl.__version__' \
  || fail "$py has no pytorch_lightning 2.6.6 (bash tools/setup_torch2.sh installs it)"
start=$SECONDS

"$py" "$peer" fit_full "$tmp/f" 6 >"$tmp/fit.log" 2>&1 || { cat "$tmp/fit.log"; fail "Trainer.fit"; }
out=$("$ckpt" --world_size=2 --shard=inp.weight=0 import "$tmp/f/full.ckpt" "$tmp/imp") || fail "import: $out"
echo "$out"
grep -q "nesting recorded" <<<"$out" || fail "the nesting was not recorded: $out"
grep -q "not carried" <<<"$out" && fail "an entry was not carried: $out"
"$ckpt" verify "$tmp/imp" >/dev/null || fail "verify of the import"
listing=$("$ckpt" inspect "$tmp/imp") || fail "inspect"
for key in global_step epoch lr_schedulers hyper_parameters optimizer_states.0.param_groups; do
  grep -q "$key" <<<"$listing" || fail "value $key missing from the import: $listing"
done
out=$("$ckpt" export "$tmp/imp" "$tmp/back.ckpt") || fail "export: $out"
echo "$out"
grep -q "nested as the imported file was" <<<"$out" || fail "export: $out"
"$py" "$peer" same_tree "$tmp/f/full.ckpt" "$tmp/back.ckpt" || fail "the exported tree differs from the .ckpt's"
"$py" "$peer" resume_full "$tmp/f/full.ckpt" 10 "$tmp/from_ckpt.pt" >"$tmp/r1.log" 2>&1 \
  || { cat "$tmp/r1.log"; fail "resume from Lightning's own .ckpt"; }
"$py" "$peer" resume_full "$tmp/back.ckpt" 10 "$tmp/from_back.pt" >"$tmp/r2.log" 2>&1 \
  || { cat "$tmp/r2.log"; fail "resume from the exported .ckpt"; }
grep "^resume_full:" "$tmp/r2.log"
"$py" "$peer" same_resume "$tmp/from_ckpt.pt" "$tmp/from_back.pt" || fail "the resumes differ"
echo "PASS ($((SECONDS - start))s)"
