"""LibTorch from Debian's libtorch-dev, or from $SHARDLIGHT_LIBTORCH (a prefix with include/ and lib/)."""

load(":common.bzl", "MULTIARCH_LIBS", "fail_missing", "find_lib", "lib_dir_flags", "link_headers", "write_build")

def _libtorch_impl(ctx):
    prefix = ctx.os.environ.get("SHARDLIGHT_LIBTORCH", "").rstrip("/")
    if prefix:
        include_root = prefix + "/include"
        lib_dirs = [prefix + "/lib"]
        hint = " (SHARDLIGHT_LIBTORCH=%s: expected include/ and lib/ under it)" % prefix
    else:
        include_root = "/usr/include"
        lib_dirs = MULTIARCH_LIBS
        hint = ""
    if not ctx.path(include_root + "/torch/csrc/api/include/torch/version.h").exists:
        fail_missing("LibTorch headers under %s" % include_root, "libtorch-dev", hint)
    link_headers(ctx, include_root, ["ATen", "c10", "caffe2", "torch"], "libtorch-dev")
    lib_dir = find_lib(ctx, lib_dirs, "torch", "libtorch-dev").dirname

    libs = ["torch", "torch_cpu", "c10"]
    defines = ["USE_C10D_GLOO"]
    if ctx.path("%s/libtorch_cuda.so" % lib_dir).exists:
        # A CUDA LibTorch (e.g. the pytorch.org zip or an NGC container's).
        libs = ["torch", "torch_cuda", "torch_cpu", "c10_cuda", "c10"]
        defines.append("USE_C10D_NCCL")
    for lib in libs:
        find_lib(ctx, [str(lib_dir)], lib, "libtorch-dev")

    # --no-as-needed (the linker's default, stated because some toolchains
    # flip it): torch_cpu registers its operators from static initialisers,
    # so it must stay linked even when no symbol is referenced directly.
    linkopts = lib_dir_flags(lib_dir) + ["-Wl,--no-as-needed"] + ["-l" + l for l in libs] + ["-pthread"]
    write_build(ctx, "libtorch.BUILD.tpl", {
        "%{prefix}": prefix or "/usr",
        "%{defines}": repr(defines),
        "%{linkopts}": repr(linkopts),
    })

libtorch_repository = repository_rule(
    implementation = _libtorch_impl,
    environ = ["SHARDLIGHT_LIBTORCH"],
    local = True,
    doc = "LibTorch from Debian's libtorch-dev, or from $SHARDLIGHT_LIBTORCH (a prefix with include/ and lib/).",
)
