#!/usr/bin/env bash
# tools/flake_hunt/flake_hunt.sh: its arguments, and its report over a fake
# bazel whose test //a:flaky fails in the first pass only and //a:broken in
# every pass (no real bazel, no load).
set -u
hunt=$(realpath "$1")
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/hunt.XXXXXX")
fail() { echo "FAIL: $*" >&2; exit 1; }

# Plans (--dry_run): the defaults, and every argument in its place.
out=$("$hunt" --dry_run --load=0) || fail "--dry_run exited $?: $out"
grep -qx "flake_hunt: 3 pass(es) of: bazel test --config=ci --nocache_test_results --keep_going -- //..." <<<"$out" ||
  fail "default plan: $out"
out=$("$hunt" --dry_run --runs=10 --load=2 --out="$work/o" //tests/real_process:all //sharded:rank_monitor_test \
  -- --test_timeout=300) || fail "--dry_run exited $?: $out"
grep -qx "flake_hunt: 10 pass(es) of: bazel test --config=ci --nocache_test_results --keep_going --test_timeout=300 -- //tests/real_process:all //sharded:rank_monitor_test" <<<"$out" ||
  fail "plan with arguments: $out"
grep -q "stress-ng --cpu 2; logs of failures under $work/o" <<<"$out" || fail "load and logs: $out"

# Bad usage exits 2 naming the argument.
for bad in --runs=0 --runs=x --load=-1 --frobnicate; do
  out=$("$hunt" "$bad" 2>&1)
  [ $? -eq 2 ] || fail "$bad did not exit 2: $out"
  grep -q -- "${bad%%=*}" <<<"$out" || fail "$bad: the error does not name it: $out"
done

# A hunt over the fake bazel: counts per test and the kept logs.
cat >"$work/bazel" <<FAKE
#!/usr/bin/env bash
if [ "\$1" = info ]; then echo "$work/testlogs"; exit 0; fi
n=\$(cat "$work/pass" 2>/dev/null || echo 0); n=\$((n + 1)); echo \$n >"$work/pass"
mkdir -p "$work/testlogs/a/broken" "$work/testlogs/a/flaky"
echo "broken log of pass \$n" >"$work/testlogs/a/broken/test.log"
echo "flaky log of pass \$n" >"$work/testlogs/a/flaky/test.log"
echo "//a:fine                                 PASSED in 1.0s"
echo "//a:broken                               FAILED in 2.0s"
if [ \$n -eq 1 ]; then echo "//a:flaky                                TIMEOUT in 60.0s"; fi
exit 3
FAKE
chmod +x "$work/bazel"
out=$(FLAKE_HUNT_BAZEL="$work/bazel" "$hunt" --runs=3 --load=0 --out="$work/logs" //a:all)
[ $? -eq 1 ] || fail "a hunt with failures did not exit 1: $out"
grep -qx "  //a:broken: failed 3 of 3" <<<"$out" || fail "//a:broken's count: $out"
grep -qx "  //a:flaky: failed 1 of 3" <<<"$out" || fail "//a:flaky's count: $out"
grep -q "//a:fine" <<<"$out" && fail "a test that passed is reported: $out"
grep -qx "    $work/logs/run1/a/flaky.log" <<<"$out" || fail "//a:flaky's log path: $out"
[ "$(cat "$work/logs/run3/a/broken.log")" = "broken log of pass 3" ] || fail "the kept log of pass 3 is not pass 3's"

# Nothing failed: exit 0.
printf '#!/usr/bin/env bash\n[ "$1" = info ] && echo /nonexistent\nexit 0\n' >"$work/bazel"
out=$(FLAKE_HUNT_BAZEL="$work/bazel" "$hunt" --runs=2 --load=0 --out="$work/logs2") || fail "a clean hunt exited $?: $out"
grep -q "no test failed in 2 pass(es)" <<<"$out" || fail "clean hunt: $out"
echo PASS
