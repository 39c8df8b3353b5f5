"""Google Benchmark from Debian's libbenchmark-dev."""

load(":common.bzl", "MULTIARCH_LIBS", "find_lib", "lib_dir_flags", "link_headers", "require_file", "write_build")

def _benchmark_impl(ctx):
    require_file(ctx, "/usr/include/benchmark/benchmark.h", "benchmark/benchmark.h", "libbenchmark-dev")
    link_headers(ctx, "/usr/include", ["benchmark"], "libbenchmark-dev")
    lib = find_lib(ctx, MULTIARCH_LIBS, "benchmark", "libbenchmark-dev")
    write_build(ctx, "benchmark.BUILD.tpl", {"%{linkopts}": repr(lib_dir_flags(lib.dirname) + ["-lbenchmark", "-pthread"])})

benchmark_repository = repository_rule(implementation = _benchmark_impl, local = True)
