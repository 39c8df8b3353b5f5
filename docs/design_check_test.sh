#!/usr/bin/env bash
# The design checker fails on what it must, on a small fixture repository:
# a non-testonly //lightning target that depends on //simulate, a floor
# that reaches up, a package in no layer, a link out of the repository, a missing
# file, a package design.md names that does not exist; and passes the same
# repository without them (a testonly target may stand on simulate/core).
set -u
tool=$(realpath "$1")
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/design_check.XXXXXX")
cd "$work" || exit 1
fail() { echo "FAIL: $*" >&2; exit 1; }
passes() { out=$(/usr/bin/python3 "$tool" "$@" 2>&1) || fail "$* should pass: $out"; }
fails() {
  local want="$1"; shift
  out=$(/usr/bin/python3 "$tool" "$@" 2>&1) && fail "$* should fail: $out"
  grep -qF -- "$want" <<<"$out" || fail "$*: want '$want' in: $out"
}

mkdir -p repo/docs repo/sharded repo/lightning repo/simulate/core repo/simulate
cd repo
touch WORKSPACE
printf 'exports_files(["README.md"])\n' >BUILD.bazel
printf 'cc_library(name = "tensor")\n' >sharded/BUILD.bazel
printf 'cc_library(name = "cluster", deps = ["//sharded:tensor"])\n' >simulate/core/BUILD.bazel
printf 'cc_binary(name = "main", deps = ["//lightning:module", "//simulate/core:cluster"])\n' >simulate/BUILD.bazel
cat >lightning/BUILD.bazel <<'EOF'
load("@rules_cc//cc:defs.bzl", "cc_library", "cc_test")
cc_library(name = "module", deps = ["//sharded:tensor"] + select({"//c:x": [], "//conditions:default": []}))
cc_test(name = "module_test", deps = [":module", "//simulate/core:cluster"])
EOF
cat >docs/design.md <<'EOF'
# Design

| layer | packages | may depend on |
|---|---|---|
| `sharded` | `sharded/` | |
| `simulate/core` | `simulate/core/` | `sharded` |
| `lightning` | `lightning/` | `sharded` |
| `simulate` | `simulate/` | `lightning`, `simulate/core`, `sharded` |
| `docs` | `docs/` | `*` |

`//sharded:tensor` and `//simulate/core` live in `sharded/` and `simulate/core/`.
See [the readme](../README.md).
EOF
echo "# Readme" >README.md
touch docs/BUILD.bazel
passes layers docs/design.md
passes refs docs/design.md README.md

# A package no row of the table holds.
mkdir -p extra && touch extra/BUILD.bazel
fails "//extra: in no layer" layers docs/design.md
rm -r extra

# with_line FILE LINE WANT ARGS...: FILE with LINE appended fails the check
# ARGS with WANT in its output; FILE is restored after.
with_line() {
  local file="$1" line="$2" want="$3"; shift 3
  cp "$file" "$work/saved"
  printf '%s\n' "$line" >>"$file"
  fails "$want" "$@"
  cp "$work/saved" "$file"
}

# lightning reaching up into simulate, into simulate/core outside a test; a
# floor that reaches up.
with_line lightning/BUILD.bazel 'cc_library(name = "up", deps = ["//simulate:main"])' \
  "//lightning:up (lightning) depends on //simulate:main (simulate)" layers docs/design.md
with_line lightning/BUILD.bazel 'cc_binary(name = "bench", srcs = ["b.cc"], deps = ["//simulate/core:cluster"])' \
  "//lightning:bench (lightning) depends on //simulate/core:cluster" layers docs/design.md
with_line simulate/core/BUILD.bazel 'cc_library(name = "up", deps = ["//lightning:module"])' \
  "//simulate/core:up (simulate/core) depends on //lightning:module (lightning)" layers docs/design.md
passes layers docs/design.md

# References: a package, a file, a link that leave the repository or lead nowhere.
with_line docs/design.md 'The old `//gone/package:lib`.' "//gone/package:lib: no such package" refs docs/design.md
with_line docs/design.md 'The code in `sharded/missing.cc`.' "sharded/missing.cc\`: no such file or folder" \
  refs docs/design.md
with_line README.md 'More in [the guide](../../elsewhere/guide.md).' "../../elsewhere/guide.md: outside the repository" \
  refs docs/design.md README.md
with_line README.md 'See [x](docs/nothing.md).' "docs/nothing.md: no such file" refs docs/design.md README.md
with_line README.md 'See [y](https://example.org/).' "https://example.org/: a link outside the repository" \
  refs docs/design.md README.md
passes refs docs/design.md README.md
echo "PASS"
