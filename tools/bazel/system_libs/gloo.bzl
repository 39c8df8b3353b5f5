"""Gloo from Debian's libgloo-dev (LibTorch's CPU collectives)."""

load(":common.bzl", "MULTIARCH_LIBS", "find_lib", "lib_dir_flags", "link_headers", "require_file", "write_build")

def _gloo_impl(ctx):
    require_file(ctx, "/usr/include/gloo/allreduce.h", "Gloo headers /usr/include/gloo", "libgloo-dev")
    link_headers(ctx, "/usr/include", ["gloo"], "libgloo-dev")
    lib = find_lib(ctx, MULTIARCH_LIBS, "gloo", "libgloo-dev")
    write_build(ctx, "gloo.BUILD.tpl", {"%{linkopts}": repr(lib_dir_flags(lib.dirname) + ["-lgloo"])})

gloo_repository = repository_rule(implementation = _gloo_impl, local = True)
