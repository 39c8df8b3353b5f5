#!/usr/bin/env bash
# Runs bazel test targets N times with the CPUs loaded, every result fresh,
# and reports each test that failed at least once: how often, and the logs.
#
#   tools/flake_hunt/flake_hunt.sh [--runs=N] [--load=K] [--out=DIR] [--dry_run]
#                                  [TARGET...] [-- BAZEL_TEST_FLAG...]
#
# TARGET defaults to //... (the whole suite). --runs (default 3) passes, each
# `bazel test --config=ci --nocache_test_results --keep_going`, while
# `stress-ng --cpu K` (default: one per core) keeps the CPUs busy -- a loaded
# machine changes the order of events the way a full-suite run or a busy CI
# host does. Each failed test's log is kept as DIR/run<i>/<package>/<name>.log
# (bazel overwrites its own at the next pass). --dry_run prints the plan only.
# Exit status: 0 when nothing failed, 1 when a test failed, 2 on bad usage or
# when stress-ng is missing (tools/setup.sh installs it).
# $FLAKE_HUNT_BAZEL replaces `bazel` (the script's own test uses a fake one).
set -uo pipefail

usage() {
  echo "flake_hunt: $*" >&2
  echo "usage: tools/flake_hunt/flake_hunt.sh [--runs=N] [--load=K] [--out=DIR] [--dry_run] [TARGET...] [-- BAZEL_TEST_FLAG...]" >&2
  exit 2
}

runs=3
load=$(nproc)
out=""
dry_run=0
targets=()
bazel_flags=()
flags_done=0
for arg in "$@"; do
  if ((flags_done)); then
    bazel_flags+=("$arg")
    continue
  fi
  case "$arg" in
    --runs=*) runs=${arg#--runs=} ;;
    --load=*) load=${arg#--load=} ;;
    --out=*) out=${arg#--out=} ;;
    --dry_run) dry_run=1 ;;
    --) flags_done=1 ;;
    -*) usage "unknown flag '$arg'" ;;
    *) targets+=("$arg") ;;
  esac
done
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || usage "--runs=$runs: want a positive number of passes"
[[ "$load" =~ ^[0-9]+$ ]] || usage "--load=$load: want a number of CPU workers (0: no load)"
((${#targets[@]} > 0)) || targets=("//...")
bazel=${FLAKE_HUNT_BAZEL:-bazel}
test_cmd=("$bazel" test --config=ci --nocache_test_results --keep_going "${bazel_flags[@]}" -- "${targets[@]}")

echo "flake_hunt: $runs pass(es) of: ${test_cmd[*]}"
echo "flake_hunt: load: stress-ng --cpu $load; logs of failures under ${out:-a new temporary directory}"
((dry_run)) && exit 0
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/flake_hunt.XXXXXX")
if ((load > 0)) && ! command -v stress-ng >/dev/null; then
  echo "flake_hunt: stress-ng is missing: run tools/setup.sh" >&2
  exit 2
fi
mkdir -p "$out" || usage "cannot create --out=$out"

stress_pid=""
stop_load() { [ -n "$stress_pid" ] && kill "$stress_pid" 2>/dev/null && wait "$stress_pid" 2>/dev/null; }
trap stop_load EXIT
if ((load > 0)); then
  stress-ng --cpu "$load" --quiet &
  stress_pid=$!
fi

testlogs=$("$bazel" info bazel-testlogs 2>/dev/null)
declare -A failures=() logs=()
for ((i = 1; i <= runs; i++)); do
  "${test_cmd[@]}" >"$out/run$i.out" 2>&1
  rc=$?
  # The summary's lines: "//pkg:name   FAILED in 12.3s" (also TIMEOUT, FLAKY, NO STATUS).
  mapfile -t failed < <(sed -n 's/^\(\/\/[^ ]*\) .*\(FAILED\|TIMEOUT\|FLAKY\|NO STATUS\|INCOMPLETE\).*/\1/p' "$out/run$i.out" | sort -u)
  for t in "${failed[@]}"; do
    failures[$t]=$((${failures[$t]:-0} + 1))
    rel=${t#//}
    rel=${rel/://}
    kept="$out/run$i/$rel.log"
    mkdir -p "$(dirname "$kept")"
    cp "$testlogs/$rel/test.log" "$kept" 2>/dev/null || kept="(no log: see $out/run$i.out)"
    logs[$t]="${logs[$t]:-}    $kept"$'\n'
  done
  echo "flake_hunt: pass $i/$runs: bazel exited $rc, ${#failed[@]} test(s) failed"
  # Bazel's 3 is "tests failed"; anything else (1: the build failed) ends the hunt.
  ((rc == 0 || rc == 3)) || { echo "flake_hunt: bazel exited $rc (not a test failure): see $out/run$i.out" >&2; exit 2; }
done

if ((${#failures[@]} == 0)); then
  echo "flake_hunt: no test failed in $runs pass(es)"
  exit 0
fi
echo "flake_hunt: tests that failed at least once in $runs pass(es):"
for t in $(printf '%s\n' "${!failures[@]}" | sort); do
  echo "  $t: failed ${failures[$t]} of $runs"
  printf '%s' "${logs[$t]}"
done
exit 1
