#!/usr/bin/env bash
# Real PyTorch writes distributed checkpoints (torch.distributed.checkpoint
# under torchrun at W = 1..4, Gloo, CPU; DTensors on 1-D and 2-D meshes, and
# an FSDP2 model with its optimizer state at W = 2, 3; dcp.async_save's
# output at W = 3): shardlight's
# LoadCheckpoint reads each at other world sizes bit-equal to Python's full
# tensors and reads its non-tensor entries as Python's repr of them; the ckpt
# tool inspects, verifies, consolidates and exports it.
check="$1"; peer_save="$2"; ckpt="$3"
source "$(dirname "$0")/dcp_lib.sh" "$4" dcp || { echo "FAIL: cannot source dcp_lib.sh"; exit 1; }
for w in 1 2 3 4; do
  torchrun_py $w "$peer_save" "$tmp/dcp$w" "$tmp/ref$w.pt" "$tmp/values$w.txt" >"$tmp/save$w.log" 2>&1 \
    || { cat "$tmp/save$w.log"; fail "torchrun W=$w dcp.save"; }
  "$check" "$tmp/dcp$w" "$tmp/ref$w.pt" 1,2,3,4 "$tmp/values$w.txt" || fail "load of the W=$w DCP checkpoint"
done
# dcp.async_save's output at W = 3.
torchrun_py 3 "$peer_save" "$tmp/async3" "$tmp/aref3.pt" "$tmp/avalues3.txt" async >"$tmp/async.log" 2>&1 \
  || { cat "$tmp/async.log"; fail "torchrun W=3 dcp.async_save"; }
"$check" "$tmp/async3" "$tmp/aref3.pt" 2,4 "$tmp/avalues3.txt" || fail "load of the W=3 dcp.async_save checkpoint"
# FSDP2: a fully_shard'ed model and its AdamW state, saved at W = 2 and 3.
for w in 2 3; do
  torchrun_py $w "$peer_save" "$tmp/fsdp$w" "$tmp/fref$w.pt" "$tmp/fvalues$w.txt" fsdp2 >"$tmp/fsave$w.log" 2>&1 \
    || { cat "$tmp/fsave$w.log"; fail "torchrun W=$w FSDP2 dcp.save"; }
  grep -q "optim.param_groups.0.lr = 0.01" "$tmp/fvalues$w.txt" || fail "FSDP2 values: $(cat "$tmp/fvalues$w.txt")"
  "$check" "$tmp/fsdp$w" "$tmp/fref$w.pt" 1,2,4 "$tmp/fvalues$w.txt" || fail "load of the W=$w FSDP2 checkpoint"
done
out=$("$ckpt" inspect "$tmp/dcp4") || fail "ckpt inspect of a DCP checkpoint: $out"
grep -q "PyTorch DCP" <<<"$out" || fail "inspect does not say the format: $out"
grep -q "grid" <<<"$out" || fail "inspect does not list the 2-D mesh tensor: $out"
"$ckpt" verify "$tmp/dcp4" >"$tmp/verify.txt" 2>&1 || { cat "$tmp/verify.txt"; fail "ckpt verify of a DCP checkpoint"; }
grep -q "no checksums" "$tmp/verify.txt" || fail "verify does not say a DCP checkpoint has no checksums: $(cat "$tmp/verify.txt")"
# consolidate: one safetensors file, each tensor bit-equal to Python's.
"$ckpt" consolidate "$tmp/dcp3" "$tmp/whole.safetensors" >/dev/null || fail "ckpt consolidate of a DCP checkpoint"
"$LIBTORCH_PYTHON" "$(dirname "$0")/consolidated_matches.py" "$tmp/whole.safetensors" "$tmp/ref3.pt" \
  || fail "the consolidated file differs from Python's tensors"
# import: a DCP directory resharded into shardlight's format for 3 ranks.
"$ckpt" --world_size=3 --shard=emb.weight=1 import "$tmp/dcp4" "$tmp/imported" >/dev/null || fail "ckpt import of a DCP checkpoint"
"$ckpt" verify "$tmp/imported" >/dev/null || fail "verify of the checkpoint imported from DCP"
"$check" "$tmp/imported" "$tmp/ref4.pt" 2 - || fail "load of the checkpoint imported from DCP"
# export: a torch.save file that torch.load(weights_only=True) reads, bit-equal.
"$ckpt" export "$tmp/dcp2" "$tmp/exported.pt" >/dev/null || fail "ckpt export of a DCP checkpoint"
"$LIBTORCH_PYTHON" - "$tmp/exported.pt" "$tmp/ref2.pt" <<'PY' || fail "the exported file differs from Python's tensors"
import sys, torch
got, want = torch.load(sys.argv[1], weights_only=True), torch.load(sys.argv[2])
# The export carries the checkpoint's non-tensor entries too (the saver's
# step, lr and optimizer.* values), beside the tensors.
values = sorted(k for k in got if not isinstance(got[k], torch.Tensor))
assert {"step", "lr"} <= set(values), values
tensors = {k: v for k, v in got.items() if isinstance(v, torch.Tensor)}
assert sorted(tensors) == sorted(want), (list(tensors), list(want))
for k in want:
    assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape and torch.equal(got[k], want[k]), k
print("exported: %d tensors equal, %d values" % (len(want), len(values)))
PY
echo "PASS"
