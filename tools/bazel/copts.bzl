"""Compiler options shared by every shardlight target (one place to change them)."""

load("@libtorch//:build.bzl", "LIBTORCH_COPTS")

# LIBTORCH_COPTS is empty for a LibTorch that compiles under .bazelrc's
# default -std=c++17 (1.13) and -std=c++20 for one whose headers demand it
# (2.13 on); rule copts follow --cxxopt on the command line, so it decides.
SHARDLIGHT_COPTS = [
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Werror=return-type",
] + LIBTORCH_COPTS
