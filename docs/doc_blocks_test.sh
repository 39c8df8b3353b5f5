#!/usr/bin/env bash
# The doc checker fails on what it must: a command that fails or exits with
# another code than the page says, an unknown program, label or config, a
# "not run"/"not compiled" marker without a reason, a pipe; and passes a page
# whose commands succeed. Programs are stand-ins (/bin/true, /bin/false, a
# script that records its arguments).
set -u
tool=$(realpath "$1")
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/doc_blocks.XXXXXX")
cd "$work" || exit 1
fail() { echo "FAIL: $*" >&2; exit 1; }

printf 'build:ci --color=no\n' >bazelrc
printf '#!/bin/sh\necho "$@" >>"%s/args"\n' "$work" >record && chmod +x record
printf 'LIBTORCH_PREFIX=/nowhere\nLIBTORCH_VERSION=0\nLIBTORCH_TORCHRUN=""\n' >peer.sh
common=(--bazelrc=bazelrc --peer=peer.sh --setup=/bin/true --bin=//tools/ckpt="$work/record"
  --bin=//simulate:cluster=/bin/false --bin=//x:ok=/bin/true --label=//tests:known_test)

page() { cat >"$1"; }
passes() { out=$(/usr/bin/python3 "$tool" sh --page="$1" "${common[@]}" 2>&1) || fail "$1 should pass: $out"; }
fails() {
  out=$(/usr/bin/python3 "$tool" sh --page="$1" "${common[@]}" 2>&1) && fail "$1 should fail: $out"
  grep -q -- "$2" <<<"$out" || fail "$1: want '$2' in: $out"
}

fence='```'
page good.md <<EOF2
Text, then a block that is run:
${fence}sh
bazel run //x:ok -- --flag       # a comment
bazel-bin/tools/ckpt/ckpt inspect /tmp/c && ckpt \\
    verify /tmp/c
bazel run //simulate:cluster -- --world_size=0   # exits 1
bazel test --config=ci //... //tests:known_test
${fence}
${fence}sh
# not run: needs a Slurm cluster
srun --nodes=2 bazel-bin/tools/ckpt/ckpt inspect /shared/c
${fence}
${fence}sh
pip install something    # names none of the run words: not a checked block
${fence}
EOF2
passes good.md
grep -q "4 commands run, 0 failures" <<<"$out" || fail "good.md: want 4 commands run: $out"
# /tmp/ in a command is the page's scratch directory, under TEST_TMPDIR.
scratch="${TEST_TMPDIR:-/tmp}/docs\.[^/ ]*/tmp/c"
grep -qx "inspect $scratch" <(sed -n 1p args) && grep -qx "verify $scratch" <(sed -n 2p args) ||
  fail "ckpt got other arguments: $(cat args)"

page failing.md <<EOF2
${fence}bash
bazel run //simulate:cluster -- --steps=3
${fence}
EOF2
fails failing.md "failing.md:2: exited 1, the page says 0"

page wrong_exit.md <<EOF2
${fence}sh
bazel run //x:ok   # exits 2
${fence}
EOF2
fails wrong_exit.md "exited 0, the page says 2"

page unknown_label.md <<EOF2
${fence}sh
bazel run //tools/gone -- --flag
${fence}
EOF2
fails unknown_label.md "//tools/gone: not a target this test knows"

page unknown_test.md <<EOF2
${fence}sh
# not run: labels are still checked
bazel test //tests:renamed_test
${fence}
EOF2
fails unknown_test.md "//tests:renamed_test: not a target this test knows"

page unknown_config.md <<EOF2
${fence}sh
bazel test --config=nope //...
${fence}
EOF2
fails unknown_config.md "no such config in .bazelrc"

page unknown_program.md <<EOF2
${fence}sh
bazel-bin/tools/ckpt/ckpt inspect x
rm -rf /tmp/x && ckpt inspect x
${fence}
EOF2
fails unknown_program.md "'rm' is not a command the doc runner knows"

page no_reason.md <<EOF2
${fence}sh
# not run:
bazel run //x:ok
${fence}
EOF2
fails no_reason.md "needs a reason"

page pipe.md <<EOF2
${fence}sh
bazel run //x:ok | grep y
${fence}
EOF2
fails pipe.md "'|' is not supported"

page no_torchrun.md <<EOF2
${fence}sh
torchrun --standalone --nproc_per_node=2 --no_python bazel-bin/x/ok
${fence}
EOF2
fails no_torchrun.md "has no torchrun"

# C++: blocks become one namespace per page, includes hoisted, #line kept;
# a page's main() is called; "not compiled" needs a reason.
page code.md <<EOF2
${fence}cpp
#include <vector>
int Twice(int x) { return 2 * x; }
${fence}
${fence}cpp
int main() { return Twice(0); }
${fence}
${fence}cpp
// not compiled: pseudo-code
this is not C++
${fence}
EOF2
/usr/bin/python3 "$tool" cpp code.md >code.cc || fail "cpp failed on code.md"
grep -q '^namespace docs_code {' code.cc || fail "no page namespace: $(cat code.cc)"
grep -q '^#line 6 "code.md"' code.cc || fail "no #line for the second block: $(cat code.cc)"
grep -q 'docs_code::main()' code.cc || fail "the page's main() is not called: $(cat code.cc)"
grep -q 'this is not C++' code.cc && fail "a 'not compiled' block was compiled"
[ "$(grep -n '#include <vector>' code.cc | cut -d: -f1)" -lt "$(grep -n '^namespace docs_code' code.cc | cut -d: -f1)" ] ||
  fail "#include not hoisted above the namespace"
g++ -std=c++17 -o code code.cc || fail "the generated file does not compile"
mkdir -p t && TEST_TMPDIR="$work/t" ./code >/dev/null || fail "the page's main() returning 0 failed the run"
sed -i 's/return Twice(0)/return Twice(1)/' code.md
/usr/bin/python3 "$tool" cpp code.md >code.cc && g++ -std=c++17 -o code code.cc || fail "second compile"
rm -rf t && mkdir t && TEST_TMPDIR="$work/t" ./code >/dev/null 2>&1 && fail "a main() returning 2 passed"

page bad_code.md <<EOF2
${fence}cpp
// not compiled:
int x;
${fence}
EOF2
/usr/bin/python3 "$tool" cpp bad_code.md >/dev/null 2>&1 && fail "'not compiled' without a reason was accepted"

# The README's label table must be the list the C++ blocks compile against.
printf '| label | what |\n|---|---|\n| `@shardlight//a:b` | x |\n| `@shardlight//c` | y |\n' >readme.md
/usr/bin/python3 "$tool" labels readme.md //a:b //c >/dev/null || fail "equal label lists differ"
/usr/bin/python3 "$tool" labels readme.md //a:b >/dev/null && fail "a README label missing from the list passed"
/usr/bin/python3 "$tool" labels readme.md //a:b //c //d >/dev/null && fail "a list label missing from the README passed"
echo PASS
