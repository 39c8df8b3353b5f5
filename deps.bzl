"""shardlight's external dependencies, for this workspace and for consumers.

In a consumer's WORKSPACE:

    local_repository(name = "shardlight", path = "/path/to/shardlight")
    load("@shardlight//:deps.bzl", "shardlight_dependencies")
    shardlight_dependencies()

Every repository is declared with `maybe`, so a consumer that already defines
one (a source build of Abseil, the real rules_cc on a newer Bazel) keeps its own.
"""

load("@bazel_tools//tools/build_defs/repo:utils.bzl", "maybe")
load(
    "//tools/bazel:offline_repos.bzl",
    "offline_coverage_tools",
    "offline_rules_cc",
    "offline_rules_java",
)
load("//tools/bazel/system_libs:absl.bzl", "absl_repository")
load("//tools/bazel/system_libs:benchmark.bzl", "benchmark_repository")
load("//tools/bazel/system_libs:curl.bzl", "curl_repository")
load("//tools/bazel/system_libs:gloo.bzl", "gloo_repository")
load("//tools/bazel/system_libs:googletest.bzl", "googletest_repository")
load("//tools/bazel/system_libs:libtorch.bzl", "libtorch_repository")
load("//tools/bazel/system_libs:nlohmann_json.bzl", "nlohmann_json_repository")
load("//tools/bazel/system_libs:openssl.bzl", "openssl_repository")
load("//tools/bazel/system_libs:seaweedfs.bzl", "seaweedfs_repository")

def shardlight_dependencies():
    maybe(offline_rules_cc, name = "rules_cc")
    maybe(offline_rules_java, name = "rules_java")
    maybe(offline_coverage_tools, name = "remote_coverage_tools")
    maybe(libtorch_repository, name = "libtorch")
    maybe(gloo_repository, name = "gloo")
    maybe(absl_repository, name = "com_google_absl")
    maybe(googletest_repository, name = "com_google_googletest")
    maybe(nlohmann_json_repository, name = "nlohmann_json")
    maybe(benchmark_repository, name = "com_github_google_benchmark")
    maybe(curl_repository, name = "curl")
    maybe(openssl_repository, name = "openssl")
    maybe(seaweedfs_repository, name = "seaweedfs")
