"""Compiler options shared by every shardlight target (one place to change them)."""

SHARDLIGHT_COPTS = [
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Werror=return-type",
]
