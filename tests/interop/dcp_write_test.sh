#!/usr/bin/env bash
# shardlight saves a PyTorch distributed checkpoint at W = 1, 3, 4 simulated
# ranks; real torch.distributed.checkpoint.load reads it in one process into
# plain tensors and under torchrun at W' = 2 and 4 into DTensors, and
# dcp_to_torch_save converts it: every tensor bit-equal (every value equal) to shardlight's own
# export of the same dict. shardlight's LoadCheckpoint reads it back too.
save="$1"; peer_load="$2"; ckpt="$3"; check="$4"
source "$(dirname "$0")/dcp_lib.sh" "$5" dcpw || { echo "FAIL: cannot source dcp_lib.sh"; exit 1; }
for w in 1 3 4; do
  out=$("$save" "$w" "$tmp/dcp$w" "$tmp/ref$w") || fail "shardlight DCP save at W=$w: $out"
  grep -Eq "removed [0-9]+ files? in .*earlier DCP checkpoint" <<<"$out" || fail "the second save did not remove the first's files: $out"
  [ "$(ls "$tmp/dcp$w" | grep -c '\.distcp$')" = "$w" ] || fail "W=$w: expected $w data files, found: $(ls -A "$tmp/dcp$w")"
  "$ckpt" export "$tmp/ref$w" "$tmp/ref$w.pt" >/dev/null || fail "export of the reference"
  "$LIBTORCH_PYTHON" "$peer_load" plain "$tmp/dcp$w" "$tmp/ref$w.pt" || fail "dcp.load (plain) of shardlight's W=$w save"
  for w2 in 2 4; do
    torchrun_py $w2 "$peer_load" dtensor "$tmp/dcp$w" "$tmp/ref$w.pt" >"$tmp/load$w$w2.log" 2>&1 \
      || { cat "$tmp/load$w$w2.log"; fail "dcp.load into DTensors at W'=$w2 of shardlight's W=$w save"; }
  done
done
"$LIBTORCH_PYTHON" "$peer_load" torch_save "$tmp/dcp3" "$tmp/ref3.pt" "$tmp" || fail "dcp_to_torch_save of shardlight's save"
# The non-tensor values are Python's own (the comparisons above were against
# shardlight's export): as dcp_save_check wrote them, seed 7.
"$LIBTORCH_PYTHON" - "$tmp/converted.pt" <<'PY' || fail "the DCP save's values are not what dcp_save_check saved"
import sys, torch
sd = torch.load(sys.argv[1], weights_only=True)
want = {"step": 7000 + 2**40, "optim.param_groups.0.lr": 2.5e-4 * 7, "optim.param_groups.0.betas": (0.9, 0.95),
        "optim.param_groups.0.params": [0, -1], "optim.param_groups.0.foreach": None, "run": "run-\u03b1 'q'",
        "loader": b"\x00\xff\x80\n", "sched": {"last_epoch": 5, "verbose": False, 3: []}}
got = {k: v for k, v in sd.items() if not isinstance(v, torch.Tensor)}
assert got == want and all(type(got[k]) is type(want[k]) for k in want), (got, want)
print("values: %d as saved" % len(got))
PY
# shardlight reads its own DCP output back, at another world size.
"$check" "$tmp/dcp4" "$tmp/ref4.pt" 2,3 - || fail "LoadCheckpoint of shardlight's own DCP save"
echo "PASS"
