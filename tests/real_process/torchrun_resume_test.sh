#!/usr/bin/env bash
# Real processes under torchrun: 4 processes train and checkpoint, 3 resume
# from that checkpoint (resharding), and the final parameters are
# bit-identical to the thread simulator's run of the same seed, steps and
# world sizes. Then a hung rank under real processes is named by its peers.
source "$(dirname "$0")/common.sh" "$@"

want=$(sim_digest 4 12 77)
[ -n "$want" ] || fail "the simulator printed no digest"
note "simulator 4 -> 3 ranks, 12 steps: digest $want"

ckpt="$work/ckpt"
out=$(torchrun_job 4 "$train_bin" --steps=6 --seed=77 --checkpoint_dir="$ckpt" 2>&1) || fail "4-process job exited $?: $out"
[ "$(grep -c '^train: rank [0-3]/4 ' <<<"$out")" -eq 4 ] || fail "want one line per rank: $out"
grep -q "^train: job of 4 processes (torchrun, gloo) trained steps 0->6" <<<"$out" || fail "no job line: $out"
"$ckpt_bin" verify "$ckpt" >/dev/null || fail "the 4-process checkpoint does not verify"

out=$(torchrun_job 3 "$train_bin" --steps=12 --seed=77 --checkpoint_dir="$ckpt" 2>&1) || fail "3-process job exited $?: $out"
grep -q "^train: resumed from step 6" <<<"$out" || fail "the 3-process job did not resume: $out"
got=$(digest_of "$out")
note "torchrun 4 -> 3 processes: digest $got"
[ "$got" = "$want" ] || fail "real processes ended at digest '$got', the simulator at '$want'"

# A rerun of a finished job says it has nothing to do and keeps the checkpoint as it is.
before=$(cat "$ckpt"/* 2>/dev/null | md5sum)
out=$(torchrun_job 3 "$train_bin" --steps=12 --seed=77 --checkpoint_dir="$ckpt" 2>&1) || fail "rerun exited $?: $out"
grep -q "^train: nothing to do: .* is at step 12 and --steps=12" <<<"$out" || fail "a finished job's rerun did not say it has nothing to do: $out"
[ "$(cat "$ckpt"/* 2>/dev/null | md5sum)" = "$before" ] || fail "a finished job's rerun changed the checkpoint: $out"

# A rank that stalls past the collective timeout is named by every peer.
start=$(date +%s)
out=$(torchrun_job 3 "$train_bin" --steps=8 --seed=1 --timeout_ms=1500 --fault=timeout:rank=1,step=2 2>&1)
rc=$?
[ $rc -ne 0 ] || fail "the stalled job succeeded: $out"
for r in 0 2; do
  grep -q "^\(\[default$r\]:\)\{0,1\}train: rank $r: .*rank 1 had not arrived at collective" <<<"$out" ||
    fail "rank $r did not name the stalled rank 1: $out"
done
note "stalled rank named by both peers in $(($(date +%s) - start)) s"
echo "PASS"
