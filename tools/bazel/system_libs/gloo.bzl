"""Gloo's headers for ProcessGroupGloo.hpp, from the selected LibTorch when it ships them.

Gloo's code is inside libtorch_cpu; only Debian's LibTorch links Debian's
libgloo.so. A LibTorch that ships no gloo headers (the torch wheels) is
compiled against Debian's libgloo-dev headers as declarations only: shardlight
touches gloo through shared_ptr<gloo::transport::Device> and ProcessGroupGloo's
own functions, and //lightning/gate:gloo_headers_test proves that no gloo code
from those headers is compiled into shardlight's objects.
"""

load(":common.bzl", "MULTIARCH_LIBS", "find_lib", "lib_dir_flags", "link_headers", "require_file", "write_build")
load(":libtorch_probe.bzl", "selected_libtorch")

def _gloo_impl(ctx):
    t = selected_libtorch(ctx)
    if not t.debian and ctx.path(t.prefix + "/include/gloo/allreduce.h").exists:
        link_headers(ctx, t.prefix + "/include", ["gloo"], "libgloo-dev")
        source, linkopts = "libtorch", []
    else:
        require_file(ctx, "/usr/include/gloo/allreduce.h", "Gloo headers /usr/include/gloo", "libgloo-dev")
        link_headers(ctx, "/usr/include", ["gloo"], "libgloo-dev")
        if t.debian:
            lib = find_lib(ctx, MULTIARCH_LIBS, "gloo", "libgloo-dev")
            source, linkopts = "debian", lib_dir_flags(lib.dirname) + ["-lgloo"]
        else:
            source, linkopts = "debian-headers", []
    write_build(ctx, "gloo.BUILD.tpl", {"%{linkopts}": repr(linkopts), "%{source}": source})

gloo_repository = repository_rule(implementation = _gloo_impl, environ = ["SHARDLIGHT_LIBTORCH", "HOME"], local = True)
