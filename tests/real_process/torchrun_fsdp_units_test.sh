#!/usr/bin/env bash
# Per-unit FSDP as real processes: 2 torchrun workers train a small stack of
# units (tools/bench/fsdp_memory_bench, RunFsdpUnit in its forward) with
# FsdpOptions::per_unit and their losses equal the thread simulator's run of
# the same model, and ddp's within fp32 rounding (1e-6 relative).
# Usage: torchrun_fsdp_units_test.sh BENCH_BIN BENCH_BIN BENCH_BIN PEER_SH
source "$(dirname "$0")/common.sh" "$@"
bench=$train_bin
model=(--width=5 --units=3 --batch=7 --steps=4)

out=$(torchrun_job 2 "$bench" --mode=process --strategy=fsdp "${model[@]}" 2>&1) || fail "2-process fsdp run exited $?: $out"
procs=$(sed -n 's/^.*fsdp_memory: shardlight fsdp W=2 losses //p' <<<"$out")
[ -n "$procs" ] || fail "no losses from the processes: $out"
sim=$("$bench" --mode=threads --world_size=2 --strategy=fsdp "${model[@]}" 2>&1) || fail "simulator fsdp: $sim"
threads=$(sed -n 's/^fsdp_memory: fsdp W=2 losses //p' <<<"$sim")
ddp_out=$("$bench" --mode=threads --world_size=2 --strategy=ddp "${model[@]}" 2>&1) || fail "simulator ddp: $ddp_out"
ddp=$(sed -n 's/^fsdp_memory: ddp W=2 losses //p' <<<"$ddp_out")
note "processes: $procs"
note "threads:   $threads"
note "ddp:       $ddp"
[ "$procs" = "$threads" ] || fail "real processes' losses differ from the simulator's"
/usr/bin/python3 - "$procs" "$ddp" <<'PY' || fail "fsdp's losses differ from ddp's"
import sys
a, b = ([float(v) for v in s.split()] for s in sys.argv[1:3])
assert len(a) == len(b) == 4, (a, b)
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print(f"--- fsdp vs ddp: largest relative difference {worst:.3g}")
assert worst <= 1e-6, worst
assert a[-1] < a[0], "the model should learn"
PY
echo "PASS"
