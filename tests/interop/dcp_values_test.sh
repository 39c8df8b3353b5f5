#!/usr/bin/env bash
# Real PyTorch (dcp.save, torch 2.x) writes a checkpoint whose non-tensor
# entries are what a resume needs (an AdamW's param_groups, a StepLR's state,
# a step, non-ASCII text, pickled bytes as torch.save's protocol 2 spells
# them, nan) and one class instance: `ckpt inspect` prints each as Python's
# repr in .metadata's order; `ckpt import` carries every plain one into
# shardlight's format and names the one it cannot; `ckpt inspect` of the
# import shows the same reprs, and `ckpt diff` finds every value equal.
peer="$1"; ckpt="$2"
source "$(dirname "$0")/dcp_lib.sh" "$3" dcp_values || { echo "FAIL: cannot source dcp_lib.sh"; exit 1; }
"$LIBTORCH_PYTHON" "$peer" "$tmp/dcp" "$tmp/values.txt" >"$tmp/save.log" 2>&1 || { cat "$tmp/save.log"; fail "dcp.save"; }
grep -q "^dataloader.dp_rank_0 = b'" "$tmp/values.txt" || fail "the peer saved no bytes value: $(cat "$tmp/values.txt")"
grep -v "^odd = " "$tmp/values.txt" >"$tmp/plain.txt"
# The non-tensor lines of an inspect, without their indent.
values_of() { sed -n 's/^    \([^ ].* = .*\)$/\1/p'; }
"$ckpt" inspect "$tmp/dcp" >"$tmp/inspect_dcp.txt" 2>&1 || { cat "$tmp/inspect_dcp.txt"; fail "ckpt inspect of the DCP checkpoint"; }
values_of <"$tmp/inspect_dcp.txt" | grep -v "^odd = " >"$tmp/got_dcp.txt"
diff "$tmp/plain.txt" "$tmp/got_dcp.txt" || fail "inspect's values differ from Python's repr"
grep -q "^    odd = <not carried: it holds a fractions.Fraction" "$tmp/inspect_dcp.txt" \
  || fail "inspect does not name the class instance: $(cat "$tmp/inspect_dcp.txt")"
grep -q "1 of them not carried by import" "$tmp/inspect_dcp.txt" || fail "inspect does not count it: $(cat "$tmp/inspect_dcp.txt")"
"$ckpt" verify "$tmp/dcp" >"$tmp/verify.txt" 2>&1 || { cat "$tmp/verify.txt"; fail "ckpt verify"; }
grep -q "note: non-tensor entry 'odd' is not carried by import" "$tmp/verify.txt" || fail "verify: $(cat "$tmp/verify.txt")"
# import: the plain values carried, the other named.
"$ckpt" --world_size=2 import "$tmp/dcp" "$tmp/imported" >"$tmp/import.txt" 2>&1 || { cat "$tmp/import.txt"; fail "ckpt import"; }
n=$(wc -l <"$tmp/plain.txt")
grep -q "and $n non-tensor entries for 2 ranks" "$tmp/import.txt" || fail "import does not count the values: $(cat "$tmp/import.txt")"
grep -q "^  'odd': it holds a fractions.Fraction" "$tmp/import.txt" || fail "import does not name what it drops: $(cat "$tmp/import.txt")"
"$ckpt" verify "$tmp/imported" >/dev/null || fail "verify of the import"
# diff: every value equal, the one not carried named as not compared.
out=$("$ckpt" diff "$tmp/dcp" "$tmp/imported") || fail "diff of the DCP checkpoint and its import: $out"
grep -q "^EQUAL: 8 tensors bit for bit, $n non-tensor entries equal$" <<<"$out" \
  && grep -q "^not compared  'odd' (A): it holds a fractions.Fraction" <<<"$out" || fail "diff: $out"
"$ckpt" inspect "$tmp/imported" >"$tmp/inspect_sl.txt" 2>&1 || { cat "$tmp/inspect_sl.txt"; fail "inspect of the import"; }
values_of <"$tmp/inspect_sl.txt" >"$tmp/got_sl.txt"
diff "$tmp/plain.txt" "$tmp/got_sl.txt" || fail "the imported checkpoint's values differ from Python's repr"
# The index holds what ast.literal_eval reads back to Python's own values.
"$LIBTORCH_PYTHON" - "$tmp/imported/index.json" "$tmp/values.txt" <<'PY' || fail "the index's values do not read back in Python"
import ast, json, math, sys
index = json.load(open(sys.argv[1], encoding="utf-8"))
want = dict(line.rstrip("\n").split(" = ", 1) for line in open(sys.argv[2], encoding="utf-8"))
got = {v["key"]: v["value"] for v in index["values"]}
assert list(got) == [k for k in want if k != "odd"], (list(got), list(want))
for key, text in got.items():
    if text == "nan":
        assert want[key] == "nan"
        continue
    assert ast.literal_eval(text) == ast.literal_eval(want[key]), (key, text, want[key])
print("index values: %d read back" % len(got))
PY
echo "PASS"
