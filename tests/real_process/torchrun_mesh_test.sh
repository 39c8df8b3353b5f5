#!/usr/bin/env bash
# The mesh job as real processes under torchrun: 4 processes train a column-
# then row-parallel pair on a 2x2 mesh (data x tensor parallel) and save it,
# 3 processes load that checkpoint on a 1x3 mesh, and the loaded model is
# bit-identical to the saved one -- and to the thread simulator's run of the
# same seed and steps (`cluster --scenario=mesh`). A mesh that does not fit
# the world is refused on every rank with the reason.
source "$(dirname "$0")/common.sh" "$@"

sim=$("$cluster_bin" --scenario=mesh --steps=4 --seed=21 2>&1) || fail "the mesh scenario failed: $sim"
want=$(sed -n 's/^mesh: saved model digest \([0-9a-f]*\)$/\1/p' <<<"$sim")
[ -n "$want" ] || fail "the simulator printed no digest: $sim"
note "simulator 2x2 -> 1x3: digest $want"

mesh_digest() { sed -n "s/^train: mesh job of $1 processes on a $2 mesh: $3 model digest \([0-9a-f]*\)$/\1/p" <<<"$4"; }

ckpt="$work/mesh-ckpt"
out=$(torchrun_job 4 "$train_bin" --job=mesh --mesh=2x2 --steps=4 --seed=21 --checkpoint_dir="$ckpt" 2>&1) ||
  fail "4-process mesh job exited $?: $out"
[ "$(grep -c '^train: rank [0-3]/4 mesh 2x2 trained steps 4 ' <<<"$out")" -eq 4 ] || fail "want one line per rank: $out"
saved=$(mesh_digest 4 2x2 saved "$out")
note "torchrun 2x2: saved digest $saved"
[ "$saved" = "$want" ] || fail "real processes saved digest '$saved', the simulator '$want'"
"$ckpt_bin" verify "$ckpt" >/dev/null || fail "the mesh checkpoint does not verify"

out=$(torchrun_job 3 "$train_bin" --job=mesh --mesh=1x3 --seed=21 --checkpoint_dir="$ckpt" 2>&1) ||
  fail "3-process mesh job exited $?: $out"
[ "$(grep -c '^train: rank [0-2]/3 mesh 1x3 loaded steps 0' <<<"$out")" -eq 3 ] || fail "want one line per rank: $out"
loaded=$(mesh_digest 3 1x3 loaded "$out")
note "torchrun 1x3: loaded digest $loaded"
[ "$loaded" = "$saved" ] || fail "the model loaded on 1x3 ($loaded) differs from the saved one ($saved)"

# A mesh that does not fit the world, or is not DPxTP: every rank exits 2
# before it meets the others, naming what is wrong.
for r in 0 1 2; do
  out=$("$train_bin" --job=mesh --mesh=2x2 --rank=$r --world_size=3 --master_addr=127.0.0.1 --master_port=1 2>&1)
  rc=$?
  [ $rc -eq 2 ] || fail "rank $r of a 2x2 mesh on 3 processes exited $rc: $out"
  grep -q "device mesh 2x2 has 4 ranks but the world has 3" <<<"$out" || fail "rank $r gave no reason: $out"
done
out=$("$train_bin" --job=mesh --mesh=2x 2>&1)
[ $? -eq 2 ] && grep -q "mesh shape '2x' is not sizes >= 1 joined by 'x'" <<<"$out" || fail "bad --mesh: $out"
echo "PASS"
