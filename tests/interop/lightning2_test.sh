#!/usr/bin/env bash
# shardlight <-> the real pytorch_lightning 2.x (tools/setup_torch2.sh pins it
# in the torch 2.x venv), both ways, on the --config=torch2 leg:
#  (a) Trainer.fit + ModelCheckpoint writes a .ckpt -> ckpt import (sharded over
#      2 ranks) -> ckpt export -> Python: the weights bit-equal to the .ckpt's,
#      global_step carried;
#  (b) ckpt --lightning export of that shardlight checkpoint -> a fresh Trainer
#      .fit(ckpt_path=...) starts from its weights and global_step, trains on;
#  (c) a 2-process ModelParallelStrategy (FSDP2, CPU/Gloo) fit under torchrun
#      writes a distributed checkpoint directory -> ckpt import -> the weights
#      bit-equal to torch's own dcp_to_torch_save of it.
ckpt="$1"; peer="$2"
# shellcheck source=/dev/null
source "$3" # LIBTORCH_PYTHON, LIBTORCH_VERSION, LIBTORCH_PREFIX
if [ -n "$LIBTORCH_PYTHON" ] && [ "${LIBTORCH_VERSION%%.*}" -lt 2 ]; then
  echo "SKIP: torch $LIBTORCH_VERSION ($LIBTORCH_PYTHON): pytorch-lightning 2.6.6 needs torch >= 2.1 (the --config=torch2 leg)"
  exit 0
fi
source "$(dirname "$0")/dcp_lib.sh" "$3" l2 || { echo "FAIL: cannot source dcp_lib.sh"; exit 1; }
py="$LIBTORCH_PYTHON"
"$py" -c 'import pytorch_lightning as pl; assert pl.__version__ == "2.6.6", pl.__version__' \
  || fail "$py has no pytorch_lightning 2.6.6 (bash tools/setup_torch2.sh installs it)"
start=$SECONDS

# (a) Lightning writes, shardlight imports.
"$py" "$peer" fit "$tmp/a" 6 >"$tmp/fit.log" 2>&1 || { cat "$tmp/fit.log"; fail "Trainer.fit"; }
out=$("$ckpt" --world_size=2 --shard=inp.weight=0,out.weight=1 --prefix=model. --global_step --global_step_key=trainer.step \
      import "$tmp/a/fit.ckpt" "$tmp/imp") || fail "import of Lightning's fit.ckpt: $out"
echo "$out"
grep -q "global_step 6 -> trainer.step" <<<"$out" || fail "global_step not imported: $out"
grep -q "nesting recorded" <<<"$out" || fail "the .ckpt's other entries were not carried: $out"
"$ckpt" verify "$tmp/imp" >/dev/null || fail "verify of the imported checkpoint"
"$ckpt" --prefix=model. export "$tmp/imp" "$tmp/imp.pt" >/dev/null || fail "export of the imported checkpoint"
"$py" "$peer" same_weights "$tmp/a/fit.ckpt" "$tmp/imp.pt" || fail "imported weights differ from the .ckpt's"

# (b) shardlight writes a Lightning .ckpt, Lightning resumes from it.
out=$("$ckpt" --lightning --prefix=model. export "$tmp/imp" "$tmp/export.ckpt") || fail "lightning export: $out"
grep -q "global_step 6" <<<"$out" || fail "lightning export: $out"
"$py" "$peer" same_weights "$tmp/a/fit.ckpt" "$tmp/export.ckpt" 6 || fail "exported .ckpt"
"$py" "$peer" resume "$tmp/export.ckpt" "$tmp/a/fit.ckpt" 10 >"$tmp/resume.log" 2>&1 \
  || { cat "$tmp/resume.log"; fail "Trainer.fit(ckpt_path=) of the exported .ckpt"; }
grep "^resume:" "$tmp/resume.log"

# (c) ModelParallelStrategy writes a distributed checkpoint, shardlight imports.
mkdir -p "$tmp/d"
torchrun_py 2 "$peer" fit_dist "$tmp/d" 4 model_parallel >"$tmp/dist.log" 2>&1 \
  || { cat "$tmp/dist.log"; fail "ModelParallelStrategy fit under torchrun"; }
"$ckpt" --world_size=3 import "$tmp/d/fit.ckpt" "$tmp/dimp" || fail "import of the distributed checkpoint"
"$ckpt" --prefix=state_dict. export "$tmp/dimp" "$tmp/dimp.pt" >/dev/null || fail "export of the imported DCP"
"$py" "$peer" dcp_ref "$tmp/d/fit.ckpt" "$tmp/dref.pt" 2>/dev/null || fail "dcp_to_torch_save"
"$py" "$peer" same_weights "$tmp/dref.pt" "$tmp/dimp.pt" || fail "weights imported from the distributed checkpoint differ"
echo "PASS ($((SECONDS - start))s)"
