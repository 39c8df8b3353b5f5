"""Local stand-ins for the repositories Bazel 4.2.3 would otherwise download.

Bazel 4.2.3's own @bazel_tools loads @rules_cc and @rules_java and aliases
@remote_coverage_tools as soon as any cc_test is analysed. Offline, each one has
to exist locally; see README.md in this folder for why each one is needed.
"""

_RULES_CC_DEFS = '''"""rules_cc surface backed by Bazel's native C++ rules (offline stand-in)."""

def _native(kind):
    return getattr(native, kind)

def cc_binary(**attrs):
    _native("cc_binary")(**attrs)

def cc_import(**attrs):
    _native("cc_import")(**attrs)

def cc_library(**attrs):
    _native("cc_library")(**attrs)

def cc_proto_library(**attrs):
    _native("cc_proto_library")(**attrs)

def cc_shared_library(**attrs):
    _native("cc_shared_library")(**attrs)

def cc_test(**attrs):
    _native("cc_test")(**attrs)

def cc_toolchain(**attrs):
    _native("cc_toolchain")(**attrs)

def cc_toolchain_suite(**attrs):
    _native("cc_toolchain_suite")(**attrs)

def fdo_prefetch_hints(**attrs):
    _native("fdo_prefetch_hints")(**attrs)

def fdo_profile(**attrs):
    _native("fdo_profile")(**attrs)

def objc_import(**attrs):
    _native("objc_import")(**attrs)

def objc_library(**attrs):
    _native("objc_library")(**attrs)
'''

_RULES_JAVA_DEFS = '''"""rules_java surface backed by Bazel's native Java rules (offline stand-in)."""

def _native(kind):
    return getattr(native, kind)

def java_binary(**attrs):
    _native("java_binary")(**attrs)

def java_import(**attrs):
    _native("java_import")(**attrs)

def java_library(**attrs):
    _native("java_library")(**attrs)

def java_lite_proto_library(**attrs):
    _native("java_lite_proto_library")(**attrs)

def java_package_configuration(**attrs):
    _native("java_package_configuration")(**attrs)

def java_plugin(**attrs):
    _native("java_plugin")(**attrs)

def java_proto_library(**attrs):
    _native("java_proto_library")(**attrs)

def java_runtime(**attrs):
    _native("java_runtime")(**attrs)

def java_test(**attrs):
    _native("java_test")(**attrs)

def java_toolchain(**attrs):
    _native("java_toolchain")(**attrs)
'''

# Coverage is the one feature the offline build does not have: the targets exist
# so that analysis succeeds, and say so plainly if anyone runs `bazel coverage`.
_COVERAGE_SCRIPT = '''#!/bin/sh
echo "shardlight: coverage tools are not available in the offline build (see tools/bazel/README.md)" >&2
exit 1
'''

_COVERAGE_BUILD = '''package(default_visibility = ["//visibility:public"])

sh_binary(name = "coverage_report_generator", srcs = ["unavailable.sh"])

sh_binary(name = "lcov_merger", srcs = ["unavailable.sh"])
'''

def _offline_repo_impl(ctx):
    for path, content in ctx.attr.files.items():
        ctx.file(path, content, executable = path.endswith(".sh"))
    ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % ctx.name)

_offline_repo = repository_rule(
    implementation = _offline_repo_impl,
    attrs = {"files": attr.string_dict(mandatory = True)},
    doc = "A repository made of the given files, written locally; nothing is downloaded.",
)

def offline_rules_cc(name):
    _offline_repo(name = name, files = {
        "BUILD.bazel": "",
        "cc/BUILD.bazel": 'exports_files(["defs.bzl"])\n',
        "cc/defs.bzl": _RULES_CC_DEFS,
    })

def offline_rules_java(name):
    _offline_repo(name = name, files = {
        "BUILD.bazel": "",
        "java/BUILD.bazel": 'exports_files(["defs.bzl"])\n',
        "java/defs.bzl": _RULES_JAVA_DEFS,
    })

def offline_coverage_tools(name):
    _offline_repo(name = name, files = {
        "BUILD.bazel": _COVERAGE_BUILD,
        "unavailable.sh": _COVERAGE_SCRIPT,
    })
