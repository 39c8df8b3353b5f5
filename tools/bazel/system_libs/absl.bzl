"""Abseil from Debian's libabsl-dev, with the package and target labels of github.com/abseil/abseil-cpp."""

load(":common.bzl", "MULTIARCH_LIBS", "find_lib", "lib_dir_flags", "link_headers", "require_file", "write_build")

# Upstream package -> {target: [shared libraries it needs]}. Only the targets
# shardlight uses; the labels match github.com/abseil/abseil-cpp.
_ABSL_TARGETS = {
    "absl/base": {"base": ["base", "raw_logging_internal", "spinlock_wait", "log_severity"], "core_headers": []},
    "absl/cleanup": {"cleanup": []},
    "absl/container": {"flat_hash_map": ["raw_hash_set", "hash", "city", "low_level_hash"], "flat_hash_set": ["raw_hash_set", "hash", "city", "low_level_hash"], "btree": [], "inlined_vector": []},
    "absl/flags": {
        "flag": ["flags_internal", "flags_marshalling", "flags_reflection", "flags_config", "flags_program_name", "flags_private_handle_accessor", "flags_commandlineflag", "flags_commandlineflag_internal"],
        "parse": ["flags_parse", "flags_usage", "flags_usage_internal"],
        "usage": ["flags_usage", "flags_usage_internal"],
        "reflection": ["flags_reflection", "flags_commandlineflag", "flags_private_handle_accessor"],
    },
    "absl/hash": {"hash": ["hash", "city", "low_level_hash"]},
    "absl/status": {"status": ["status", "cord", "cord_internal", "cordz_info", "cordz_handle", "cordz_functions", "exponential_biased", "strerror", "stacktrace", "symbolize", "debugging_internal", "demangle_internal", "malloc_internal"], "statusor": ["statusor", "bad_variant_access"]},
    "absl/strings": {"strings": ["strings", "strings_internal", "int128", "throw_delegate"], "str_format": ["str_format_internal"], "cord": ["cord", "cord_internal"]},
    "absl/synchronization": {"synchronization": ["synchronization", "graphcycles_internal", "time", "time_zone", "civil_time"]},
    "absl/time": {"time": ["time", "time_zone", "civil_time"]},
    "absl/types": {"optional": ["bad_optional_access"], "span": [], "variant": ["bad_variant_access"]},
}

# Upstream-style dependencies between those targets, so a target that uses
# StatusOr also links Status, and so on.
_ABSL_DEPS = {
    "absl/status:statusor": ["//absl/status:status"],
    "absl/status:status": ["//absl/strings:strings", "//absl/strings:cord", "//absl/base:base"],
    "absl/strings:strings": ["//absl/base:base"],
    "absl/strings:str_format": ["//absl/strings:strings"],
    "absl/strings:cord": ["//absl/strings:strings"],
    "absl/flags:flag": ["//absl/strings:strings", "//absl/strings:str_format", "//absl/synchronization:synchronization"],
    "absl/flags:parse": ["//absl/flags:flag", "//absl/flags:usage", "//absl/flags:reflection"],
    "absl/flags:usage": ["//absl/flags:flag"],
    "absl/flags:reflection": ["//absl/flags:flag"],
    "absl/synchronization:synchronization": ["//absl/time:time", "//absl/base:base"],
    "absl/time:time": ["//absl/base:base"],
    "absl/container:flat_hash_map": ["//absl/hash:hash"],
    "absl/container:flat_hash_set": ["//absl/hash:hash"],
}

def _absl_impl(ctx):
    require_file(ctx, "/usr/include/absl/base/config.h", "Abseil headers /usr/include/absl", "libabsl-dev")
    link_headers(ctx, "/usr/include", ["absl"], "libabsl-dev")
    lib_dir = find_lib(ctx, MULTIARCH_LIBS, "absl_base", "libabsl-dev").dirname
    write_build(ctx, "absl.BUILD.tpl")
    for pkg, targets in _ABSL_TARGETS.items():
        specs = {}
        for target, libs in targets.items():
            for lib in libs:
                find_lib(ctx, [str(lib_dir)], "absl_" + lib, "libabsl-dev")
            specs[target] = {"libs": libs, "deps": _ABSL_DEPS.get("%s:%s" % (pkg, target), [])}
        write_build(ctx, "absl_package.BUILD.tpl", {
            "%{targets}": repr(specs),
            "%{lib_dir_flags}": repr(lib_dir_flags(lib_dir)),
        }, path = pkg + "/BUILD.bazel")

absl_repository = repository_rule(implementation = _absl_impl, local = True)
