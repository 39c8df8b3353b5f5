#!/usr/bin/env bash
# The cluster binary as a user runs it: default run, --help, bad flags.
set -u
source "$(dirname "$0")/cli_test_lib.sh" "$1" || { echo "FAIL: cannot source cli_test_lib.sh" >&2; exit 1; }
# shellcheck source=/dev/null
source "$2"  # LIBTORCH_VERSION, LIBTORCH_CUDA: the gate's real row must describe this build

# The main job as the README runs it: no flags.
out=$("$bin" 2>&1) || fail "default run exited $?: $out"
grep -q "phase 1: 4 ranks" <<<"$out" || fail "default run: no phase 1 table: $out"
grep -q "phase 2: reloaded on 3 ranks" <<<"$out" || fail "default run: no phase 2 table: $out"
grep -q "reloaded model equals saved: yes" <<<"$out" || fail "default run: reload check: $out"

out=$("$bin" --world_size=2 --steps=4 --log_every=1 2>&1) || fail "log_every run exited $?: $out"
[ "$(grep -cE '^step [0-9]+/[0-9]+  loss [0-9.]+  [0-9.]+ steps/s$' <<<"$out")" -eq 4 ] || fail "want 4 progress lines: $out"

# A crash injected into phase 1 is reported, and the run resumes and finishes.
out=$("$bin" --world_size=3 --steps=6 --fault=crash:rank=1,step=2 2>&1) || fail "fault run exited $?: $out"
grep -q "rank 1: injected crash of rank 1 after step 2" <<<"$out" || fail "fault run: crash not reported: $out"
grep -q "reloaded model equals saved: yes" <<<"$out" || fail "fault run: reload check: $out"

# Issue 15, defect 6: every rank returns the agreed error; the failing rank
# is the one named first, whichever rank returned first.
for i in 1 2 3; do
  out=$("$bin" --world_size=5 --steps=10 --fault=save-crash:rank=4,step=4 --checkpoint_dir="$TEST_TMPDIR/crash6_$i" 2>&1) ||
    fail "save-crash run exited $?: $out"
  grep -q "phase 1 on 5 ranks failed: ABORTED: rank 4: checkpoint save to .* failed on rank 4: injected crash" <<<"$out" ||
    fail "save-crash: rank 4 not named first: $out"
done
# Issue 15, defect 7: a rank slower than the collective timeout is named.
out=$("$bin" --world_size=4 --steps=6 --timeout_ms=1000 --fault=delay:rank=2,step=2,ms=1800 \
      --checkpoint_dir="$TEST_TMPDIR/delay7" 2>&1) || fail "delay run exited $?: $out"
grep -q "phase 1 on 4 ranks failed: .*rank 2 had not arrived at collective" <<<"$out" || fail "delay: slow rank not named: $out"

# Issue 28: a checkpoint directory whose index.json is a dangling link or a
# link loop is refused, naming it, with every file as it was; only one with
# no index at all starts over, and it says what it removed.
d="$TEST_TMPDIR/broken_index"
snapshot() { (cd "$1" && find . -printf '%p %y %l\n' | sort && find . -type f -exec md5sum {} + | sort); }
out=$("$bin" --world_size=2 --steps=4 --seed=3 --checkpoint_dir="$d" 2>&1) || fail "issue 28 first run exited $?: $out"
mv "$d/index.json" "$TEST_TMPDIR/index.json.saved"
for target in /nonexistent/index.json index.json; do
  rm -f "$d/index.json"
  ln -s "$target" "$d/index.json"
  before=$(snapshot "$d")
  out=$("$bin" --world_size=2 --steps=4 --seed=3 --checkpoint_dir="$d" 2>&1) && fail "index.json -> $target: exited 0: $out"
  grep -q "resume from '$d' failed on rank 0: checkpoint index: cannot open '$d/index.json': it is a" <<<"$out" ||
    fail "index.json -> $target: the error does not name the index: $out"
  [ "$(snapshot "$d")" = "$before" ] || fail "index.json -> $target: the directory changed: $out"
done
grep -q "symbolic-link loop" <<<"$out" || fail "a loop is not called one: $out"
rm "$d/index.json"
out=$("$bin" --world_size=2 --steps=4 --seed=3 --checkpoint_dir="$d" 2>&1) || fail "no index: exited $?: $out"
grep -q "phase 1: 2 ranks, steps 0->2" <<<"$out" || fail "no index: did not start over: $out"
grep -qF "checkpoint: removed 3 files in '$d': the directory had no index (leftovers of a save that never committed)" <<<"$out" ||
  fail "no index: the removal was not said: $out"

out=$("$bin" --scenario=faults --world_size=3 --steps=4 2>&1) || fail "faults scenario exited $?: $out"
[ "$(grep -c "resumed from step" <<<"$out")" -eq 3 ] || fail "faults: want 3 resumes: $out"
grep -q "completed despite the delay" <<<"$out" || fail "faults: delay row: $out"

out=$("$bin" --scenario=reshard --world_size=5 2>&1) || fail "reshard exited $?: $out"
grep -q "moved at most once, and only when its owner changed: yes" <<<"$out" || fail "reshard: $out"
out=$("$bin" --scenario=roundtrip --world_size=3 2>&1) || fail "roundtrip exited $?: $out"
grep -q "loaded model equals saved: yes" <<<"$out" || fail "roundtrip: $out"
out=$("$bin" --scenario=mesh --steps=3 2>&1) || fail "mesh exited $?: $out"
grep -q "1x3 mesh; loaded model equals saved: yes" <<<"$out" || fail "mesh: $out"
# The LM under fsdp: trained on 4 ranks, resumed on 3 and 2 (lm_scenario.h).
out=$("$bin" --scenario=lm --strategy=fsdp --steps=2 --logdir= 2>&1) || fail "lm fsdp exited $?: $out"
grep -q "^lm: fsdp on 4 ranks.*one unit per block, gathered one at a time" <<<"$out" || fail "lm fsdp: no strategy line: $out"
grep -q "^lm: resumed on 3x1 at step 1" <<<"$out" || fail "lm fsdp: no resume on 3 ranks: $out"
grep -q "^lm: resumed on 2x1 at step 1" <<<"$out" || fail "lm fsdp: no resume on 2 ranks: $out"

out=$("$bin" --scenario=collectives --world_size=3 --steps=2 2>&1) || fail "collectives exited $?: $out"
grep -q "collectives: 3 ranks" <<<"$out" || fail "no report header in: $out"
[ "$(grep -cE '^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$' <<<"$out")" -eq 3 ] || fail "want 3 rank rows: $out"

gate=$("$bin" --scenario=gate --world_size=2 2>&1) || fail "gate scenario exited $?: $gate"
grep -qE "^this process \(real\) +${LIBTORCH_VERSION//./\\.} +hooks" <<<"$gate" || fail "gate: real build row: $gate"
backend=gloo
[ "$LIBTORCH_CUDA" = 1 ] && backend=nccl  # NCCL compiled in decides, GPU or not (lightning/gate)
grep -A1 "^this process (real)" <<<"$gate" | grep -qE "reason: ShardedTensor state-dict hooks are on: the $backend backend implements" ||
  fail "gate: real build should decide on $backend: $gate"
grep -qE "^sim: ngc-21.07 +1\.10\.0a0\+ecc3718 +no hooks +gather,scatter" <<<"$gate" || fail "gate: NGC row: $gate"
grep -q "all required collectives work" <<<"$gate" || fail "gate: probe line: $gate"

help=$("$bin" --help 2>&1)
grep -q -- "--world_size" <<<"$help" || fail "--help does not list --world_size"
grep -q "collectives:" <<<"$help" || fail "--help does not list the scenarios"

expect_exit 2 "outside [1, 64]" --world_size=0
expect_exit 2 "outside [1, 64]" --world_size=65
expect_exit 2 "unknown --scenario='nope'" --scenario=nope
expect_exit 2 "--strategy: strategy 'zero3' is not one of model_parallel, fsdp_tp, fsdp, ddp, hsdp" --scenario=lm --strategy=zero3
expect_exit 2 "--strategy applies to --scenario=lm; scenario 'train' would ignore it" --strategy=fsdp
expect_exit 2 "--fsdp_per_unit applies to --strategy=fsdp; --strategy=ddp would ignore it" \
  --scenario=lm --strategy=ddp --fsdp_per_unit=false
expect_exit 2 "--fsdp_per_unit applies to --scenario=lm --strategy=fsdp; scenario 'train' would ignore it" \
  --fsdp_per_unit=false
expect_exit 2 "--param_dtype (fsdp's mixed-precision policy) applies to the fsdp and hsdp strategies only, not ddp" \
  --scenario=lm --strategy=ddp --param_dtype=bf16
expect_exit 2 "--param_dtype and --reduce_dtype apply to --scenario=lm --strategy=fsdp; scenario 'train' would ignore them" \
  --param_dtype=bf16
expect_exit 2 "must be >= 1" --steps=0
expect_exit 2 "bad value 'abc' for --world_size" --world_size=abc
expect_exit 2 "unknown flag '--bogus'" --bogus=1
expect_exit 2 'malformed fault plan "crash:rank=1"' --fault=crash:rank=1
expect_exit 2 "names rank 5 but --world_size=2" --world_size=2 --fault=crash:rank=5,step=1
echo PASS
