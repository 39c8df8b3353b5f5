#!/usr/bin/env bash
# Builds the libFuzzer binaries of tests/fuzz with clang-14 (ASan+UBSan) and
# runs each for a fixed time on a copy of its seed corpus.
#   tools/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default 20 s, every target)
# Prints one line per target: executions, new corpus entries, and the verdict;
# exits 1 when any target crashed or broke a property (its reproducer is kept
# under $SHARDLIGHT_FUZZ_OUT, default /tmp/shardlight-fuzz). CI runs it with a
# short time and a fixed SHARDLIGHT_FUZZ_SEED (0, the default, is a new
# random seed each run); the closing notes report long runs.
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
for t in "${targets[@]}"; do
  work="$out/$t"
  rm -rf "$work" && mkdir -p "$work/corpus" "$work/artifacts"
  cp tests/fuzz/corpus/"$t"/* "$work/corpus/"
  log="$work/log.txt"
  if "$bin/${t}_fuzzer" -seed="${SHARDLIGHT_FUZZ_SEED:-0}" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
      -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$work/corpus" >"$log" 2>&1; then
    verdict=ok
  else
    verdict="FAILED (see $log and $work/artifacts)"
    failed=1
  fi
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  echo "fuzz: $t: ${runs:-?} executions in ${seconds}s, corpus $(ls "$work/corpus" | wc -l) inputs: $verdict"
done
exit "$failed"
