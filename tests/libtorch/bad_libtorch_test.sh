#!/usr/bin/env bash
# Each bad LibTorch folder ends at analysis, in the repository rule, with a
# message that names the path and what is wrong (never a compile error wall or
# a crash at run time). The folders are built here: real directory layouts
# whose files carry what the probe reads (headers' version defines, the
# library's TORCH_VERSION= build string, its C++11-ABI symbol names).
set -u
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/badtorch.XXXXXX")
ws="$tmp/ws"
mkdir -p "$ws/tools/bazel/system_libs"
rules=$(dirname "$(realpath tools/bazel/system_libs/libtorch.bzl)")
cp "$rules"/*.bzl "$rules"/*.tpl "$ws/tools/bazel/system_libs/"
echo 'exports_files(glob(["*.bzl", "*.tpl"]))' >"$ws/tools/bazel/system_libs/BUILD.bazel"
cat >"$ws/WORKSPACE" <<'WS'
workspace(name = "probe")
load("//tools/bazel/system_libs:libtorch.bzl", "libtorch_repository")
libtorch_repository(name = "libtorch")
WS
touch "$ws/BUILD.bazel"

# good_prefix DIR MAJOR MINOR LIB_VERSION ABI: a LibTorch-shaped folder.
good_prefix() {
  local d=$1 major=$2 minor=$3 libv=$4 abi=$5
  mkdir -p "$d/include/ATen" "$d/include/c10" "$d/include/caffe2" "$d/include/torch/headeronly" \
    "$d/include/torch/csrc/distributed/c10d" "$d/lib"
  printf '#define TORCH_VERSION_MAJOR %s\n#define TORCH_VERSION_MINOR %s\n#define TORCH_VERSION_PATCH 0\n' \
    "$major" "$minor" >"$d/include/torch/headeronly/version.h"
  echo '#if __cplusplus < 202002L' >"$d/include/ATen/ATen.h"
  touch "$d/include/torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"
  printf 'Build settings: TORCH_VERSION=%s, _ZN4c10d16ProcessGroupGloo23createDeviceForHostname\n' "$libv" \
    >"$d/lib/libtorch_cpu.so"
  printf '%s\n' "$abi" >"$d/lib/libc10.so"
  touch "$d/lib/libtorch.so"
}

# expect NAME DIR TEXT: the rule fails naming DIR, with TEXT.
expect() {
  local name=$1 dir=$2 text=$3 out
  out=$(cd "$ws" && bazel --output_user_root="$tmp/root" --output_base="$tmp/ob" query \
    --repo_env=SHARDLIGHT_LIBTORCH="$dir" '@libtorch//:all' 2>&1) && fail "$name: the rule accepted $dir: $out"
  # The message itself (Bazel's "Error in fail:" line), not the traceback's
  # source lines, must name the folder and say what is wrong.
  local msg
  msg=$(grep -F "Error in fail: shardlight: SHARDLIGHT_LIBTORCH=$dir" <<<"$out" | head -1)
  [ -n "$msg" ] || fail "$name: the error does not name $dir: $out"
  grep -qF "$text" <<<"$msg" || fail "$name: the error does not say '$text': $msg"
  echo "ok  $name: ${msg#*Error in fail: }"
}

expect "missing" "$tmp/nowhere" "does not exist"

mkdir -p "$tmp/pyonly/lib" && touch "$tmp/pyonly/lib/libtorch.so" "$tmp/pyonly/__init__.py"
expect "python-only" "$tmp/pyonly" "has no C++ headers"

good_prefix "$tmp/nodist" 2 15 2.15.0 St7__cxx11
rm "$tmp/nodist/include/torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"
expect "no distributed" "$tmp/nodist" "without distributed support"

good_prefix "$tmp/nogloo" 2 15 2.15.0 St7__cxx11
echo 'Build settings: TORCH_VERSION=2.15.0' >"$tmp/nogloo/lib/libtorch_cpu.so"
expect "no gloo" "$tmp/nogloo" "without USE_DISTRIBUTED/USE_GLOO"

good_prefix "$tmp/mixed" 2 15 1.13.1 St7__cxx11
expect "mixed versions" "$tmp/mixed" "headers say 2.15.0 but"

good_prefix "$tmp/oldabi" 2 15 2.15.0 Ss4_Rep
expect "pre-C++11 ABI" "$tmp/oldabi" "pre-C++11 ABI"

(cd "$ws" && bazel --output_user_root="$tmp/root" --output_base="$tmp/ob" shutdown) >/dev/null 2>&1
echo "PASS"
