#!/usr/bin/env bash
# A checkpoint real torchtitan wrote (PyPI's torchtitan, pinned in
# tools/setup_torch2.sh; the torch 2.x leg, skips on 1.13): its own
# CheckpointManager saves a 2-rank FSDP2 run (model keys at the top level,
# optimizer.*, lr_scheduler.*, dataloader.* with each rank's state as pickled
# bytes in its own data file, train_state.*). `ckpt inspect` lists every
# non-tensor entry as Python's repr in .metadata's order, and the tensors in
# that order too; `ckpt verify` passes; `ckpt import` carries every entry
# and drops none; `ckpt diff` compares the values too (torchtitan's step-2
# and step-4 saves); `ckpt export --format=dcp` of the import reads back in real
# dcp.load bit-equal and value-equal to torchtitan's own checkpoint; and
# torchtitan's CheckpointManager.load resumes from the export with the same
# step, learning rate and data position, bit-equal 3 steps later.
peer="$1"; ckpt="$2"
source "$(dirname "$0")/dcp_lib.sh" "$3" torchtitan || { echo "FAIL: cannot source dcp_lib.sh"; exit 1; }
"$LIBTORCH_PYTHON" -c 'import importlib.metadata as m; v = m.version("torchtitan"); assert v == "0.3.0", v' 2>/dev/null \
  || fail "$LIBTORCH_PYTHON has no torchtitan 0.3.0 (bash tools/setup_torch2.sh installs it)"
torchrun_py 2 "$peer" save "$tmp" >"$tmp/save.log" 2>&1 || { cat "$tmp/save.log"; fail "torchtitan's CheckpointManager.save"; }
grep "^torchtitan saved" "$tmp/save.log"
orig="$tmp/run/checkpoint/step-4"
n=$(wc -l <"$tmp/values.txt")
# What the peer saved, by name: the layout under test.
for want in "train_state.step = 4" "train_state.ntokens_seen = 32" "dataloader.world_size = 2" \
  "lr_scheduler.last_epoch = 4" "optimizer.param_groups.0.weight.betas = (0.9, 0.95)" \
  "dataloader.dp_rank_0 = b'" "dataloader.dp_rank_1 = b'"; do
  grep -qF "$want" "$tmp/values.txt" || fail "torchtitan saved no '$want': $(cat "$tmp/values.txt")"
done

# The value lines of an inspect ("key = repr"), and its table's keys.
values_of() { sed -n 's/^    \([^ ].* = .*\)$/\1/p' "$1"; }
tensors_of() { sed -n '/^key  /,/^$/p' "$1" | sed '1d' | awk 'NF {print $1}'; }

# inspect: every value as Python's repr, in .metadata's order; the tensors too.
"$ckpt" inspect "$orig" >"$tmp/inspect.txt" 2>&1 || { cat "$tmp/inspect.txt"; fail "ckpt inspect of torchtitan's checkpoint"; }
grep -q "^  $n non-tensor entries:$" "$tmp/inspect.txt" || fail "inspect does not list $n values: $(cat "$tmp/inspect.txt")"
values_of "$tmp/inspect.txt" | diff "$tmp/values.txt" - || fail "inspect's values differ from what torchtitan saved"
tensors_of "$tmp/inspect.txt" | diff "$tmp/tensors.txt" - || fail "inspect's tensors are not in .metadata's order"
grep -q "not carried" "$tmp/inspect.txt" && fail "inspect: an entry not carried: $(cat "$tmp/inspect.txt")"
"$ckpt" verify "$orig" >"$tmp/verify.txt" 2>&1 || { cat "$tmp/verify.txt"; fail "ckpt verify of torchtitan's checkpoint"; }

# import: every entry carried, none named as dropped.
"$ckpt" --world_size=2 import "$orig" "$tmp/sl" >"$tmp/import.txt" 2>&1 || { cat "$tmp/import.txt"; fail "ckpt import"; }
grep -q "16 tensors and $n non-tensor entries for 2 ranks" "$tmp/import.txt" || fail "import: $(cat "$tmp/import.txt")"
grep -qi "not carried\|skipped\|dropped" "$tmp/import.txt" && fail "import dropped an entry: $(cat "$tmp/import.txt")"
"$ckpt" verify "$tmp/sl" >/dev/null || fail "verify of the import"
"$ckpt" inspect "$tmp/sl" >"$tmp/inspect_sl.txt" 2>&1 || { cat "$tmp/inspect_sl.txt"; fail "inspect of the import"; }
values_of "$tmp/inspect_sl.txt" | diff "$tmp/values.txt" - || fail "the import's values differ (or their order)"
tensors_of "$tmp/inspect_sl.txt" | diff "$tmp/tensors.txt" - || fail "the import's tensors are not in .metadata's order"

# export --format=dcp, read by real dcp.load, then resumed by torchtitan.
"$ckpt" --format=dcp --world_size=3 export "$tmp/sl" "$tmp/back" >"$tmp/export.txt" 2>&1 \
  || { cat "$tmp/export.txt"; fail "ckpt export --format=dcp"; }
grep -q "16 tensors and $n non-tensor entries for 3 ranks" "$tmp/export.txt" || fail "export: $(cat "$tmp/export.txt")"
out=$("$ckpt" diff "$orig" "$tmp/back") || fail "ckpt diff of torchtitan's checkpoint and the export: $out"
grep -q "^EQUAL: 16 tensors bit for bit, $n non-tensor entries equal$" <<<"$out" || fail "diff: $out"
# diff compares the values too: torchtitan's own step-2 save, and keys renamed.
out=$("$ckpt" diff "$tmp/run/checkpoint/step-2" "$orig"); [ $? = 1 ] || fail "diff of step 2 and step 4 passed: $out"
for want in "DIFFER  train_state.step: 2 vs 4" "DIFFER  lr_scheduler.last_epoch: 2 vs 4" "equal   dataloader.world_size"; do
  grep -qxF "$want" <<<"$out" || fail "diff of step 2 and step 4 lacks '$want': $out"
done
"$ckpt" --format=dcp --rename=train_state.=ts. export "$tmp/sl" "$tmp/renamed" >/dev/null || fail "export --rename"
out=$("$ckpt" diff "$orig" "$tmp/renamed"); [ $? = 1 ] || fail "diff with renamed values passed: $out"
grep -q "^ONLY-A  train_state.step$" <<<"$out" && grep -q "^ONLY-B  ts.ntokens_seen$" <<<"$out" \
  && grep -q "^4 keys differ, 68 equal$" <<<"$out" || fail "diff with renamed values: $out"
"$LIBTORCH_PYTHON" "$peer" compare "$orig" "$tmp/back" 2>"$tmp/compare.err" \
  || { cat "$tmp/compare.err"; fail "dcp.load of the export differs from torchtitan's checkpoint"; }
torchrun_py 2 "$peer" resume "$tmp" "$tmp/back" >"$tmp/resume.log" 2>&1 \
  || { cat "$tmp/resume.log"; fail "torchtitan's CheckpointManager.load of the export"; }
grep "^torchtitan resumed" "$tmp/resume.log"
echo "PASS"
