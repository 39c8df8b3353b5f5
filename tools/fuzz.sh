#!/usr/bin/env bash
# Builds the libFuzzer binaries of tests/fuzz with clang-14 (ASan+UBSan) and
# runs each for a fixed time on a copy of its seed corpus.
#   tools/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default 20 s, every target)
# Prints one line per target: executions, new corpus entries, and the verdict;
# exits 1 when any target crashed or broke a property (its reproducer is kept
# under $SHARDLIGHT_FUZZ_OUT, default /tmp/shardlight-fuzz). CI runs it with a
# short time and a fixed SHARDLIGHT_FUZZ_SEED (0, the default, is a new
# random seed each run); the closing notes report long runs.
#
# A campaign (issue 26): every target for 10^6 executions or one hour,
# whichever comes first, its grown corpus minimised back into the repo:
#   SHARDLIGHT_FUZZ_RUNS=1000000 SHARDLIGHT_FUZZ_KEEP=1 nice -n 19 bash tools/fuzz.sh 3600
# SHARDLIGHT_FUZZ_RUNS stops a target after that many executions;
# SHARDLIGHT_FUZZ_KEEP=1 minimises the old and the grown corpus into
# tests/fuzz/corpus/<target>/ (keep_corpus, below). Commit the result.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  # The fuzz targets are the shardlight_fuzz_target(...) blocks: the name on the line after each.
  mapfile -t targets < <(sed -n '/^shardlight_fuzz_target(/{n;s/^ *name = "\([a-z_]*\)",$/\1/p}' tests/fuzz/BUILD.bazel)
fi
command -v clang-14 >/dev/null || { echo "fuzz: clang-14 not found (bash tools/setup.sh)"; exit 2; }
out="${SHARDLIGHT_FUZZ_OUT:-/tmp/shardlight-fuzz}"
# One output base per checkout (an output base belongs to one workspace); the
# disk cache in .bazelrc is shared, so a fresh clone builds warm.
base="${SHARDLIGHT_FUZZ_OUTPUT_BASE:-$HOME/.cache/shardlight/fuzz-output-base/$(pwd | md5sum | cut -c1-12)}"
labels=()
for t in "${targets[@]}"; do labels+=("//tests/fuzz:${t}_fuzzer"); done
# No convenience symlinks (--symlink_prefix=/): pointing bazel-* at this
# output base would make the default build walk into it. ld.gold warns about
# every ASan helper symbol; those lines say nothing.
build_log="$(mktemp)"
build_ok=1
bazel --output_base="$base" --max_idle_secs=120 build --config=fuzz --symlink_prefix=/ --noshow_progress \
  "${labels[@]}" >"$build_log" 2>&1 || build_ok=0
grep -v "Cannot export local symbol" "$build_log" || true
rm -f "$build_log"
[ "$build_ok" -eq 1 ] || { echo "fuzz: build failed"; exit 1; }
bin="$(bazel --output_base="$base" --max_idle_secs=120 info --config=fuzz bazel-bin 2>/dev/null)/tests/fuzz"
failed=0
# The kept corpus of target $1: its named seeds (hand-made, every name that is
# not a 40-hex libFuzzer hash) and, from the old kept corpus and the run's
# grown one ($2/corpus), a minimal set of inputs that adds coverage edges
# (-merge=1 -use_counters=0: edges, not hit counts; a smaller set).
keep_corpus() {
  local t="$1" work="$2" kept="$2/kept"
  local before
  before=$(ls tests/fuzz/corpus/"$t" | wc -l)
  rm -rf "$kept" && mkdir -p "$kept"
  local seed
  for seed in $(ls tests/fuzz/corpus/"$t" | grep -Ev '^[0-9a-f]{40}$'); do cp tests/fuzz/corpus/"$t/$seed" "$kept/"; done
  if "$bin/${t}_fuzzer" -merge=1 -use_counters=0 -rss_limit_mb=2048 -timeout=10 -max_len=65536 "$kept" \
      tests/fuzz/corpus/"$t" "$work/corpus" >"$work/merge.txt" 2>&1; then
    rm -f tests/fuzz/corpus/"$t"/*
    cp "$kept"/* tests/fuzz/corpus/"$t"/
    echo "fuzz: $t: kept corpus $before -> $(ls tests/fuzz/corpus/"$t" | wc -l) inputs"
  else
    echo "fuzz: $t: merge failed (see $work/merge.txt)"
    failed=1
  fi
}
for t in "${targets[@]}"; do
  work="$out/$t"
  rm -rf "$work" && mkdir -p "$work/corpus" "$work/artifacts"
  cp tests/fuzz/corpus/"$t"/* "$work/corpus/"
  log="$work/log.txt"
  if "$bin/${t}_fuzzer" -seed="${SHARDLIGHT_FUZZ_SEED:-0}" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
      -runs="${SHARDLIGHT_FUZZ_RUNS:--1}" -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$work/corpus" >"$log" 2>&1; then
    verdict=ok
  else
    verdict="FAILED (see $log and $work/artifacts)"
    failed=1
  fi
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  took="$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)"
  echo "fuzz: $t: ${runs:-?} executions in ${took:-$seconds}s, corpus $(ls "$work/corpus" | wc -l) inputs: $verdict"
  if [ "${SHARDLIGHT_FUZZ_KEEP:-0}" = 1 ] && [ "$verdict" = ok ]; then
    keep_corpus "$t" "$work"
  fi
done
exit "$failed"
