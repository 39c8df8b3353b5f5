#!/usr/bin/env bash
# Bounded memory: on a 320 MiB checkpoint, consolidate, reshard and diff with
# --buffer_mib=16 raise the tool's peak RSS by less than a 64 MiB budget over
# its baseline (the peak of `ckpt inspect`, which reads only the index: the
# LibTorch libraries and the runtime). The output is checked whole.
set -u
ckpt="$1"
maker="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }
budget_mib=64
size_mib=320

# Runs a command; prints its exit code and peak RSS in MiB.
peak() {
  /usr/bin/python3 -c '
import resource, subprocess, sys
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)' "$@"
}

"$maker" big "$tmp/big" "$size_mib" || fail "could not make the checkpoint"
read -r rc base < <(peak "$ckpt" inspect "$tmp/big")
[ "$rc" -eq 0 ] || fail "inspect exited $rc"
echo "--- baseline (inspect): $base MiB"

read -r rc used < <(peak "$ckpt" --buffer_mib=16 --progress=never consolidate "$tmp/big" "$tmp/big.safetensors")
[ "$rc" -eq 0 ] || fail "consolidate exited $rc"
bytes=$(stat -c %s "$tmp/big.safetensors")
((bytes > size_mib * 1024 * 1024)) || fail "consolidated file is $bytes bytes"
echo "--- consolidate of $size_mib MiB: peak $used MiB, $((used - base)) MiB over the baseline"
((used - base < budget_mib)) || fail "consolidate used $((used - base)) MiB over its baseline (budget $budget_mib)"
rm -f "$tmp/big.safetensors"

read -r rc used < <(peak "$ckpt" --buffer_mib=16 diff "$tmp/big" "$tmp/big")
[ "$rc" -eq 0 ] || fail "diff of a checkpoint with itself exited $rc"
echo "--- diff of $size_mib MiB with itself: peak $used MiB, $((used - base)) MiB over the baseline"
((used - base < budget_mib)) || fail "diff used $((used - base)) MiB over its baseline (budget $budget_mib)"
read -r rc used < <(peak "$ckpt" --world_size=2 reshard "$tmp/big" "$tmp/r2")
[ "$rc" -eq 0 ] || fail "reshard exited $rc"
echo "--- reshard of $size_mib MiB to 2 ranks: peak $used MiB, $((used - base)) MiB over the baseline"
((used - base < budget_mib)) || fail "reshard used $((used - base)) MiB over its baseline (budget $budget_mib)"
out=$("$ckpt" diff "$tmp/big" "$tmp/r2") || fail "the reshard differs from its input: $out"
echo PASS
