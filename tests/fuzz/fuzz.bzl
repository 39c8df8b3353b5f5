"""One fuzz target = one libFuzzer entry point in three builds.

shardlight_fuzz_target(name, src, deps) declares
  <name>_lib          the entry point (LLVMFuzzerTestOneInput), testonly;
  <name>_corpus_test  the suite's test: the target over corpus/<name>/ and
                      variants of each seed, built like every other test
                      (and under --config=asan like them);
  <name>_fuzzer       the libFuzzer binary (manual: only with --config=fuzz,
                      clang-14; tools/fuzz.sh builds and runs them).
"""

load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_library", "cc_test")
load("//tools/bazel:copts.bzl", "SHARDLIGHT_COPTS")

def shardlight_fuzz_target(name, src, deps):
    cc_library(
        name = name + "_lib",
        testonly = True,
        srcs = [src],
        copts = SHARDLIGHT_COPTS,
        deps = deps + [":fuzz_target"],
        alwayslink = True,
    )
    cc_test(
        name = name + "_corpus_test",
        size = "small",
        args = ["tests/fuzz/corpus/" + name],
        copts = SHARDLIGHT_COPTS,
        data = native.glob(["corpus/%s/*" % name], allow_empty = False),
        deps = [":" + name + "_lib", ":corpus_driver"],
    )
    cc_binary(
        name = name + "_fuzzer",
        testonly = True,
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["manual", "fuzzer"],
        deps = [":" + name + "_lib"],
    )
