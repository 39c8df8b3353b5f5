#!/usr/bin/env bash
# The LM job (a small GPT, tensor parallel) as real processes under torchrun:
# 4 processes train on a 2x2 mesh (data x tensor parallel) and checkpoint
# after step 3; 3 processes resume that checkpoint on a 1x3 mesh and their
# losses at steps 4..6 equal the uninterrupted run's (1e-5 relative). A
# missing corpus fails on every rank, naming it.
source "$(dirname "$0")/common.sh" "$@"

small=(--job=lm --lm_dim=48 --lm_heads=12 --lm_mlp=96 --lm_context=32 --batch=6 --steps=6 --seed=5 --log_every=1)
# "K L" for each "lm: step K loss L" line (torchrun's [defaultN]: prefix or not).
losses() { sed -n 's/^\(\[default0\]:\)\{0,1\}lm: step \([0-9]*\) loss \([0-9.]*\) .*/\2 \3/p' <<<"$1"; }

ckpt="$work/lm-ckpt"
out=$(torchrun_job 4 "$train_bin" "${small[@]}" --mesh=2x2 --save_at=3 --checkpoint_dir="$ckpt" 2>&1) ||
  fail "4-process LM job exited $?: $out"
[ "$(grep -c 'train: rank [0-3]/4 lm mesh 2x2 start_step 0 steps 6 ' <<<"$out")" -eq 4 ] || fail "want one line per rank: $out"
full=$(losses "$out")
[ "$(wc -l <<<"$full")" -eq 6 ] || fail "want 6 loss lines: $out"
note "2x2 losses: $(tr '\n' ' ' <<<"$full")"
awk 'NR == 1 {first = $2} END {exit !($2 < first)}' <<<"$full" || fail "the loss did not fall: $full"
"$ckpt_bin" verify "$ckpt" >/dev/null || fail "the LM checkpoint does not verify"

out=$(torchrun_job 3 "$train_bin" "${small[@]}" --mesh=1x3 --checkpoint_dir="$ckpt" 2>&1) ||
  fail "3-process LM job exited $?: $out"
[ "$(grep -c 'train: rank [0-2]/3 lm mesh 1x3 start_step 3 steps 3 ' <<<"$out")" -eq 3 ] || fail "want one resumed line per rank: $out"
resumed=$(losses "$out")
note "1x3 resumed losses: $(tr '\n' ' ' <<<"$resumed")"
[ "$(wc -l <<<"$resumed")" -eq 3 ] || fail "want 3 loss lines after the resume: $out"
join <(echo "$full") <(echo "$resumed") | awk '
  { d = $2 - $3; if (d < 0) d = -d; if (d > 1e-5 * $2) { print "step " $1 ": " $3 " after the resume, " $2 " uninterrupted"; bad = 1 } n++ }
  END { exit bad || n != 3 }' || fail "the resumed losses differ"

out=$(torchrun_job 2 "$train_bin" "${small[@]}" --mesh=1x2 --corpus=/nonexistent/corpus.txt 2>&1)
[ $? -ne 0 ] || fail "a missing corpus trained: $out"
for r in 0 1; do
  grep -q "train: rank $r: .*corpus '/nonexistent/corpus.txt' is missing" <<<"$out" || fail "rank $r gave no reason: $out"
done
echo "PASS"
