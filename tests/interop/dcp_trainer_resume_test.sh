#!/usr/bin/env bash
# The Trainer resumes from a PyTorch distributed checkpoint that real torch
# wrote (torchrun W=2, DTensors): weights, step and -- when the checkpoint
# holds it under the Trainer's keys -- optimizer state. Resumed from DCP, the
# run continues exactly as it does resumed from its own checkpoint (equal
# final digests); without optimizer state it says the optimizer starts fresh.
train="$1"; ckpt="$2"; to_dcp="$3"
source "$(dirname "$0")/dcp_lib.sh" "$4" dcpt || { echo "FAIL: cannot source dcp_lib.sh"; exit 1; }
digest() { sed -n 's/^train: final state digest \([0-9a-f]*\)$/\1/p' <<<"$1" | tail -1; }
"$train" --launcher=single --steps=3 --checkpoint_dir="$tmp/own" >/dev/null || fail "train to step 3"
"$ckpt" export "$tmp/own" "$tmp/own.pt" >/dev/null || fail "export"
# The Trainer's step and optimizer hyper-parameters are values: a DCP export
# hands them to torch as an int and a dict (not tensors).
"$ckpt" --format=dcp --world_size=2 export "$tmp/own" "$tmp/own_dcp" >/dev/null || fail "export --format=dcp"
"$LIBTORCH_PYTHON" - "$tmp/own_dcp" "$tmp/own_dcp.pt" <<'PY' || fail "the DCP export's trainer.step is not the int 3"
import sys, torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
dcp_to_torch_save(sys.argv[1], sys.argv[2])
sd = torch.load(sys.argv[2], weights_only=True)
step, hyper = sd["trainer.step"], sd["optimizer.hyper_parameters"]
assert type(step) is int and step == 3, repr(step)
assert isinstance(hyper, dict) and type(hyper["lr"]) is float, repr(hyper)
print("dcp export: trainer.step", step, "optimizer.hyper_parameters", hyper)
PY
cp -r "$tmp/own" "$tmp/own_copy"
want=$("$train" --launcher=single --steps=5 --checkpoint_dir="$tmp/own_copy") || fail "resume of its own checkpoint: $want"
for variant in with_optimizer weights_only; do
  drop=""; [ "$variant" = weights_only ] && drop="optimizer."
  # shellcheck disable=SC2086
  torchrun_py 2 "$to_dcp" "$tmp/own.pt" "$tmp/$variant" 3 $drop >"$tmp/$variant.log" 2>&1 \
    || { cat "$tmp/$variant.log"; fail "$variant: dcp.save"; }
  got=$("$train" --launcher=single --steps=5 --checkpoint_dir="$tmp/$variant") || fail "$variant: resume from DCP: $got"
  grep -q "resume: loaded step 3 from the PyTorch DCP checkpoint" <<<"$got" || fail "$variant: no DCP resume line: $got"
  if [ "$variant" = with_optimizer ]; then
    [ "$(digest "$got")" = "$(digest "$want")" ] && [ -n "$(digest "$want")" ] \
      || fail "resumed from DCP, the run ends at $(digest "$got"), not $(digest "$want") as resumed from its own checkpoint"
  else
    grep -q "skipped, the optimizer starts fresh" <<<"$got" || fail "weights only: the skipped optimizer state is not said: $got"
  fi
  # The next resume reads the shardlight checkpoint the run saved there.
  again=$("$train" --launcher=single --steps=6 --checkpoint_dir="$tmp/$variant") || fail "$variant: second resume: $again"
  grep -q "PyTorch DCP" <<<"$again" && fail "$variant: the second resume read the DCP checkpoint again: $again"
done
echo "PASS"
