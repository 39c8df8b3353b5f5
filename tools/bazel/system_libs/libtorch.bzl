"""LibTorch: Debian's libtorch-dev, or the one $SHARDLIGHT_LIBTORCH names (see libtorch_probe.bzl)."""

load(":common.bzl", "find_lib", "lib_dir_flags", "link_headers", "write_build")
load(":libtorch_probe.bzl", "probe_libtorch")

def _libtorch_impl(ctx):
    t = probe_libtorch(ctx)
    link_headers(ctx, t.include_root, ["ATen", "c10", "caffe2", "torch"], "libtorch-dev")

    # 2.x splits the headers that need no ATen into torch/headeronly (and
    # moved some c10 pieces there); both sit under include/torch already.
    libs = ["torch", "torch_cpu", "c10"]
    defines = ["USE_C10D_GLOO"]
    includes = ["include", "include/torch/csrc/api/include"]
    extra_link = []
    if t.cuda:
        libs = ["torch", "torch_cuda", "torch_cpu", "c10_cuda", "c10"]
        defines.append("USE_C10D_NCCL")
        for i, d in enumerate(t.cuda_include_dirs):
            ctx.symlink(d, "cuda/%d/include" % i)
            includes.append("cuda/%d/include" % i)

        # libtorch_cuda.so needs libcudart, libnccl, ... at link time too.
        extra_link = ["-Wl,-rpath-link,%s" % d for d in t.cuda_lib_dirs]
    for lib in libs:
        find_lib(ctx, [str(t.lib_dir)], lib, "libtorch-dev")

    # --no-as-needed (the linker's default, stated because some toolchains
    # flip it): torch_cpu registers its operators from static initialisers,
    # so it must stay linked even when no symbol is referenced directly.
    linkopts = lib_dir_flags(t.lib_dir) + extra_link + ["-Wl,--no-as-needed"] + ["-l" + l for l in libs] + ["-pthread"]
    # .bazelrc's --cxxopt=-std=c++17 is the default; only a LibTorch that
    # demands another standard adds one (and 1.13's actions keep their keys).
    cxxopts = [] if t.cxx_standard == "c++17" else ["-std=" + t.cxx_standard]
    write_build(ctx, "libtorch.BUILD.tpl", {
        "%{prefix}": t.prefix,
        "%{defines}": repr(defines),
        "%{includes}": repr(includes),
        "%{linkopts}": repr(linkopts),
    })
    ctx.template("build.bzl", Label("//tools/bazel/system_libs:libtorch_build.bzl.tpl"), {
        "%{prefix}": t.prefix,
        "%{source}": "debian" if t.debian else ("wheel" if t.peer.python else "prefix"),
        "%{version}": t.version,
        "%{lib_version}": t.lib_version,
        "%{cxx_standard}": t.cxx_standard,
        "%{copts}": repr(cxxopts),
        "%{cuda}": repr(t.cuda),
    }, executable = False)
    ctx.template("peer.sh", Label("//tools/bazel/system_libs:libtorch_peer.sh.tpl"), {
        "%{prefix}": t.prefix,
        "%{version}": t.version,
        "%{python}": t.peer.python,
        "%{torchrun}": t.peer.torchrun,
        "%{torchrun_flags}": t.peer.torchrun_flags,
        "%{cuda}": "1" if t.cuda else "0",
    }, executable = False)

libtorch_repository = repository_rule(
    implementation = _libtorch_impl,
    environ = ["SHARDLIGHT_LIBTORCH", "HOME"],
    local = True,
    doc = "LibTorch: Debian's libtorch-dev, or the one $SHARDLIGHT_LIBTORCH names (a folder with include/ and lib/).",
)
