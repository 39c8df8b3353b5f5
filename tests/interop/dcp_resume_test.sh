#!/usr/bin/env bash
# The issue-47 round trip with real PyTorch at both ends: dcp.save of a run's
# model, AdamW (param_groups: lr, betas, weight_decay, ...), StepLR state and
# step -> `ckpt import` (W=2) -> `ckpt export --format=dcp` (W=3) -> a fresh
# PyTorch job's dcp.load + set_state_dict resumes with the saved learning
# rate, step and schedule, and 3 steps later its parameters are bit-equal to
# the uninterrupted run's (dcp.load also fails on any entry the export
# dropped). The same from the DCP directory directly (W=2). The DCP writer's
# key naming and world sizes: a torch.save file with --rename and --shard at
# W=3 loads under torchrun at W'=4 into an FSDP2 x TP model's DTensors (2-D
# mesh); a shardlight checkpoint with --prefix loads into plain tensors.
peer="$1"; ckpt="$2"
source "$(dirname "$0")/dcp_lib.sh" "$3" dcp_resume || { echo "FAIL: cannot source dcp_lib.sh"; exit 1; }
"$LIBTORCH_PYTHON" "$peer" save "$tmp/torch_dcp" "$tmp" >"$tmp/save.log" 2>&1 || { cat "$tmp/save.log"; fail "dcp.save of the run"; }
"$ckpt" --world_size=2 import "$tmp/torch_dcp" "$tmp/sl" >"$tmp/import.txt" 2>&1 || { cat "$tmp/import.txt"; fail "ckpt import"; }
grep -Eq "16 tensors and [1-9][0-9]* non-tensor entries for 2 ranks" "$tmp/import.txt" || fail "import: $(cat "$tmp/import.txt")"
"$ckpt" --format=dcp --world_size=3 export "$tmp/sl" "$tmp/back" >"$tmp/export.txt" 2>&1 || { cat "$tmp/export.txt"; fail "ckpt export --format=dcp"; }
grep -Eq "16 tensors and [1-9][0-9]* non-tensor entries for 3 ranks" "$tmp/export.txt" || fail "export: $(cat "$tmp/export.txt")"
[ "$(ls "$tmp/back" | grep -c '\.distcp$')" = 3 ] || fail "expected 3 data files: $(ls -A "$tmp/back")"
"$LIBTORCH_PYTHON" "$peer" resume "$tmp/back" "$tmp" || fail "PyTorch's resume from the exported DCP checkpoint"
"$ckpt" --format=dcp --world_size=2 export "$tmp/torch_dcp" "$tmp/direct" >/dev/null || fail "export of the DCP directory"
"$LIBTORCH_PYTHON" "$peer" resume "$tmp/direct" "$tmp" || fail "PyTorch's resume from DCP -> DCP"
# A torch.save file, renamed and sharded, into FSDP2 x TP DTensors at W'=4.
"$ckpt" --format=dcp --world_size=3 --shard=net.0.weight=0,net.2.weight=1 --rename=net.= export "$tmp/net.pt" \
  "$tmp/fromfile" >"$tmp/fromfile.txt" 2>&1 || { cat "$tmp/fromfile.txt"; fail "export of a torch.save file"; }
torchrun_py 4 "$peer" fsdp_tp "$tmp/fromfile" "$tmp" >"$tmp/fsdp_tp.log" 2>&1 \
  || { cat "$tmp/fsdp_tp.log"; fail "dcp.load into an FSDP2 x TP model at W'=4 of the W=3 export"; }
grep "^fsdp_tp: " "$tmp/fsdp_tp.log"
# --prefix: the model's weights at the top level, into plain tensors.
"$ckpt" --format=dcp --world_size=2 --prefix=model. export "$tmp/sl" "$tmp/model_only" >/dev/null || fail "export --prefix"
"$LIBTORCH_PYTHON" "$peer" plain "$tmp/model_only" "$tmp" || fail "dcp.load of the --prefix export"
# Bad usage: exit 2, OUT untouched.
"$ckpt" --format=dcp --rename=net. export "$tmp/sl" "$tmp/bad" >"$tmp/bad.txt" 2>&1
[ $? = 2 ] && grep -q "is not OLD=NEW" "$tmp/bad.txt" && [ ! -e "$tmp/bad" ] || fail "a bad --rename: $(cat "$tmp/bad.txt")"
echo "PASS"
