#!/usr/bin/env bash
# The README's main job (--scenario=lm) logs its 2x2 run: metrics.csv with a
# row per step (loss, steps/s, tokens/s) and a TensorBoard event file, which
# the real tensorboard package reads back equal to the CSV on the torch 2.x
# leg (on 1.13 only its presence is checked, and the skip of the reader is
# said). Not on a terminal, the step lines stay; a log_dir that is a file
# fails before training, naming it.
# Usage: lm_logs_test.sh CLUSTER TENSORBOARD_READ_PY PEER_SH
set -u
cluster="$1"; read_py="$2"
# shellcheck source=/dev/null
source "$3"  # LIBTORCH_PYTHON, LIBTORCH_VERSION
fail() { echo "FAIL: $*"; exit 1; }
work="${TEST_TMPDIR:-/tmp}/lm_logs_test"
rm -rf "$work" && mkdir -p "$work"
steps=4

"$cluster" --scenario=lm --steps=$steps --logdir="$work/logs" >"$work/out.txt" 2>&1 || { cat "$work/out.txt"; fail "the lm scenario failed"; }
grep -q "^lm: step $steps loss" "$work/out.txt" || { cat "$work/out.txt"; fail "no step lines when stdout is not a terminal"; }
grep -q "^lm: loss, lr, steps/s and tokens/s in $work/logs" "$work/out.txt" || fail "the job does not say where its logs are"
csv="$work/logs/metrics.csv"
[ -f "$csv" ] || fail "no $csv"
head -1 "$csv" | grep -q '^step,' || fail "metrics.csv header: $(head -1 "$csv")"
# The learning rate each step used (the LM's AdamW rate, 1e-3 by default, the
# same at every step: no schedule).
lr_col=$(head -1 "$csv" | tr ',' '\n' | grep -nx lr | cut -d: -f1)
[ -n "$lr_col" ] || fail "no lr column in metrics.csv: $(head -1 "$csv")"
lrs=$(tail -n +2 "$csv" | cut -d, -f"$lr_col" | sort -u)
[ "$(awk -v x="$lrs" 'BEGIN { print (x + 0 == 0.001) }')" = 1 ] || fail "lr column: $lrs, want 0.001 at every step"
rows=$(($(wc -l <"$csv") - 1))
[ "$rows" -eq "$steps" ] || fail "metrics.csv has $rows rows, want $steps (the resumed runs must not append)"
events=("$work"/logs/events.out.tfevents.*)
[ "${#events[@]}" -eq 1 ] && [ -s "${events[0]}" ] || fail "want one non-empty event file, found: ${events[*]}"

# A log_dir that is a file: the job fails, naming it, before training.
touch "$work/a_file"
if "$cluster" --scenario=lm --steps=2 --logdir="$work/a_file" >"$work/bad.txt" 2>&1; then fail "a file as --logdir passed"; fi
grep -q "a_file" "$work/bad.txt" || { cat "$work/bad.txt"; fail "the error does not name the log_dir"; }
grep -q "^lm: step 1 loss" "$work/bad.txt" && fail "training started with a bad log_dir"

if [ -z "$LIBTORCH_PYTHON" ] || [ "${LIBTORCH_VERSION%%.*}" -lt 2 ]; then
  echo "lm logs: CSV and event file present; the tensorboard reader check is the torch 2.x leg's (torch ${LIBTORCH_VERSION} here)"
  exit 0
fi
"$LIBTORCH_PYTHON" "$read_py" "$work/logs" loss,lr,steps_per_sec,tokens_per_sec $steps 0 || fail "tensorboard does not read the job's event file"
