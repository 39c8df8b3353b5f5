#!/usr/bin/env bash
# Every dtype beyond the classic ten, both ways, against real torch 2.x:
# real dcp.save at W = 1 and 2 (uint16/32/64, five float8 formats,
# complex32/64/128; random bits with NaN/inf patterns and integer extremes;
# DTensors of some, empty shards, a 0-d and an empty tensor) -> shardlight's
# LoadCheckpoint at W' = 1..3, bit-equal to torch.save's reference; ckpt
# inspect/import/verify/diff/consolidate/export of it (real torch.load reads
# the export); and shardlight's DCP save of the same
# tensors at W = 2 -> real dcp.load (plain, and DTensors at W' = 3) bit-equal.
check="$1"; peer_save="$2"; save="$3"; peer_load="$4"; ckpt="$5"
source "$(dirname "$0")/dcp_lib.sh" "$6" dcpd || { echo "FAIL: cannot source dcp_lib.sh"; exit 1; }
for w in 1 2; do
  torchrun_py $w "$peer_save" "$tmp/dcp$w" "$tmp/ref$w.pt" >"$tmp/save$w.log" 2>&1 \
    || { cat "$tmp/save$w.log"; fail "torchrun W=$w dcp.save of every dtype"; }
  "$check" "$tmp/dcp$w" "$tmp/ref$w.pt" 1,2,3 - || fail "load of the W=$w every-dtype DCP checkpoint"
done
# The ckpt tool: inspect names the dtypes; import into shardlight's format.
out=$("$ckpt" inspect "$tmp/dcp2") || fail "ckpt inspect: $out"
for d in U16 U32 U64 F8_E4M3 F8_E5M2 F8_E4M3FNUZ F8_E5M2FNUZ F8_E8M0 C32 C64 C128; do
  grep -qw "$d" <<<"$out" || fail "inspect does not list dtype $d: $out"
done
"$ckpt" --world_size=3 import "$tmp/dcp2" "$tmp/imported" >/dev/null || fail "ckpt import of the every-dtype DCP checkpoint"
"$ckpt" verify "$tmp/imported" >/dev/null || fail "ckpt verify of the imported checkpoint"
"$check" "$tmp/imported" "$tmp/ref2.pt" 2 - || fail "load of the imported every-dtype checkpoint"
out=$("$ckpt" diff "$tmp/dcp2" "$tmp/imported") || fail "ckpt diff of the DCP checkpoint and its import: $out"
out=$("$ckpt" diff "$tmp/dcp1" "$tmp/imported" 2>&1); [ $? = 1 ] || fail "ckpt diff of two saves with different bits: $out"
for k in uint16 float8_e8m0fnu complex32 complex128 channels_last; do
  grep -q "^DIFFER  $k: max abs" <<<"$out" || fail "ckpt diff does not measure how $k differs: $out"
done
"$ckpt" consolidate "$tmp/imported" "$tmp/whole.safetensors" >/dev/null || fail "ckpt consolidate"
"$LIBTORCH_PYTHON" "$(dirname "$0")/consolidated_matches.py" "$tmp/whole.safetensors" "$tmp/ref2.pt" \
  || fail "the consolidated file differs from Python's tensors"
# ckpt export: a torch.save file (v3 over UntypedStorage for the newer dtypes) that real torch.load reads.
"$ckpt" export "$tmp/dcp2" "$tmp/exported.pt" >/dev/null || fail "ckpt export of the every-dtype DCP checkpoint"
"$LIBTORCH_PYTHON" - "$tmp/exported.pt" "$tmp/ref2.pt" <<'PY' || fail "the exported file differs from Python's tensors"
import sys, torch
got, want = torch.load(sys.argv[1], weights_only=True), torch.load(sys.argv[2])
assert sorted(got) == sorted(want), (list(got), list(want))
for k in want:
    g, w = got[k], want[k].contiguous()
    assert g.dtype == w.dtype and g.shape == w.shape, k
    assert g.reshape(-1).view(torch.uint8).equal(w.reshape(-1).view(torch.uint8)), k
print("exported: %d tensors bit-equal" % len(want))
PY
# shardlight writes them as DCP; real dcp.load reads them back.
out=$("$save" --from "$tmp/ref2.pt" 2 "$tmp/ours") || fail "shardlight DCP save of every dtype: $out"
"$LIBTORCH_PYTHON" "$peer_load" plain "$tmp/ours" "$tmp/ref2.pt" || fail "dcp.load (plain) of shardlight's every-dtype save"
torchrun_py 3 "$peer_load" dtensor "$tmp/ours" "$tmp/ref2.pt" >"$tmp/load3.log" 2>&1 \
  || { cat "$tmp/load3.log"; fail "dcp.load into DTensors at W'=3 of shardlight's every-dtype save"; }
echo "PASS"
