"""Which LibTorch the build uses, and what that LibTorch needs: the one place that looks.

`SHARDLIGHT_LIBTORCH` selects it (unset: Debian's libtorch-dev). It names a
folder with `include/` and `lib/`: a torch wheel's `torch/` folder (for the
pinned 2.x, `tools/setup.sh --torch2` makes `~/.cache/shardlight/torch-<v>/libtorch`
point at it), an official libtorch zip's folder, or an NGC container's. A
leading `~/` is the caller's home. Everything that differs between LibTorch
builds is derived here from the files themselves, never from a version string
alone: the C++ standard its headers demand, its C++ ABI, whether it is a CUDA
build (and where the CUDA and NCCL headers of that same build are), whether it
has c10d with Gloo, and which Python and torchrun belong to it. A LibTorch that
cannot work fails here, at analysis, naming the path and what is wrong.
"""

load(":common.bzl", "MULTIARCH_LIBS", "fail_missing", "find_lib")

def _fail(prefix, what):
    fail("shardlight: SHARDLIGHT_LIBTORCH=%s: %s (see README.md, \"Which LibTorch\")" % (prefix, what))

def _home(ctx, raw):
    if raw == "~" or raw.startswith("~/"):
        home = ctx.os.environ.get("HOME", "")
        if not home:
            fail("shardlight: SHARDLIGHT_LIBTORCH=%s starts with ~ but HOME is not set" % raw)
        return home + raw[1:]
    return raw

def _grep(ctx, pattern, path):
    """The first match of the extended regex `pattern` in the (binary) file `path`, or ""."""
    r = ctx.execute(["/bin/grep", "-a", "-o", "-m", "1", "-E", pattern, str(path)])
    if r.return_code != 0:
        return ""
    return r.stdout.split("\n")[0].strip()

def _header_version(ctx, include_root):
    """(major, minor, patch) from the headers' version file."""
    for rel in ["torch/headeronly/version.h", "torch/csrc/api/include/torch/version.h"]:
        p = ctx.path("%s/%s" % (include_root, rel))
        if not p.exists:
            continue
        parts = {}
        for line in ctx.read(p).split("\n"):
            words = [w for w in line.replace("\t", " ").split(" ") if w]
            if len(words) == 3 and words[0] == "#define" and words[1] in ["TORCH_VERSION_MAJOR", "TORCH_VERSION_MINOR", "TORCH_VERSION_PATCH"]:
                parts[words[1]] = words[2]
        if len(parts) == 3:
            return [parts["TORCH_VERSION_MAJOR"], parts["TORCH_VERSION_MINOR"], parts["TORCH_VERSION_PATCH"]]
    return None

def _first_with(ctx, dirs, rel):
    for d in dirs:
        if ctx.path("%s/%s" % (d, rel)).exists:
            return d
    return None

def _wheel_nvidia_packages(ctx, prefix):
    """The folders of a torch wheel's nvidia-* packages (site-packages/nvidia/*), or []."""
    nvidia = ctx.path(str(ctx.path(prefix).realpath.dirname) + "/nvidia")
    return [str(d) for d in nvidia.readdir()] if nvidia.exists else []

def _cuda_include_dirs(ctx, prefix):
    """The CUDA runtime and NCCL header folders of a CUDA LibTorch: the wheel's own nvidia-* packages first."""
    candidates = [d + "/include" for d in _wheel_nvidia_packages(ctx, prefix)]
    candidates += [prefix + "/include", "/usr/local/cuda/include", "/usr/include"]
    cuda = _first_with(ctx, candidates, "cuda_runtime_api.h")
    nccl = _first_with(ctx, candidates, "nccl.h")
    if not cuda or not nccl:
        _fail(prefix, "a CUDA LibTorch (lib/libtorch_cuda.so) but no %s found (looked in %s); install the CUDA toolkit with NCCL" %
                      ("cuda_runtime_api.h" if not cuda else "nccl.h", ", ".join(candidates)))
    return [cuda] if cuda == nccl else [cuda, nccl]

def _cuda_lib_dirs(ctx, prefix):
    """Folders that hold the CUDA libraries libtorch_cuda.so needs, for the linker's -rpath-link."""
    dirs = [d + "/lib" for d in _wheel_nvidia_packages(ctx, prefix)] + ["/usr/local/cuda/lib64"]
    return [d for d in dirs if ctx.path(d).exists]

def _peer(ctx, prefix, debian):
    """The Python and torchrun of the same torch (empty when the LibTorch has none, e.g. a zip)."""
    if debian:
        return struct(python = "/usr/bin/python3", torchrun = "/usr/bin/torchrun", torchrun_flags = "--redirects=2 --tee=2")

    # A wheel: <venv>/lib/pythonX.Y/site-packages/torch -> <venv>/bin/python.
    torch_dir = ctx.path(prefix).realpath
    venv = torch_dir.dirname.dirname.dirname.dirname
    python = ctx.path(str(venv) + "/bin/python")
    torchrun = ctx.path(str(venv) + "/bin/torchrun")
    if torch_dir.dirname.basename == "site-packages" and python.exists and torchrun.exists:
        return struct(python = str(python), torchrun = str(torchrun), torchrun_flags = "--tee=2")
    return struct(python = "", torchrun = "", torchrun_flags = "")

def selected_libtorch(ctx):
    """struct(raw, prefix, debian): the SHARDLIGHT_LIBTORCH value and the folder it names ("/usr" for Debian's)."""
    raw = ctx.os.environ.get("SHARDLIGHT_LIBTORCH", "").rstrip("/")
    return struct(raw = raw, prefix = _home(ctx, raw) if raw else "/usr", debian = not raw)

def probe_libtorch(ctx):
    """Everything the build needs to know about the selected LibTorch, checked."""
    selected = selected_libtorch(ctx)
    raw = selected.raw
    debian = selected.debian
    if debian:
        prefix = "/usr"
        include_root = "/usr/include"
        if not ctx.path(include_root + "/torch/csrc/api/include/torch/version.h").exists:
            fail_missing("LibTorch headers under /usr/include", "libtorch-dev")
        lib_dir = find_lib(ctx, MULTIARCH_LIBS, "torch", "libtorch-dev").dirname
    else:
        prefix = selected.prefix
        include_root = prefix + "/include"
        if not ctx.path(prefix).exists:
            _fail(raw, "%s does not exist" % prefix)
        if not ctx.path(prefix + "/lib").exists:
            _fail(raw, "%s has no lib/ folder (expected a LibTorch: include/ and lib/ with libtorch.so)" % prefix)
        if not ctx.path(include_root + "/ATen/ATen.h").exists:
            _fail(raw, "%s has no C++ headers (include/ATen/ATen.h): a Python-only torch install? " % prefix +
                       "Use a torch wheel's torch/ folder or a libtorch zip, which ship include/")
        lib_dir = ctx.path(prefix + "/lib")
        for lib in ["torch", "torch_cpu", "c10"]:
            if not ctx.path("%s/lib%s.so" % (lib_dir, lib)).exists:
                _fail(raw, "%s/lib%s.so is missing" % (lib_dir, lib))

    version = _header_version(ctx, include_root)
    if not version:
        _fail(raw or "(Debian)", "no TORCH_VERSION_MAJOR/MINOR/PATCH in %s/torch/.../version.h" % include_root)
    dotted = ".".join(version)

    torch_cpu = ctx.path("%s/libtorch_cpu.so" % lib_dir)
    if not torch_cpu.exists:
        torch_cpu = find_lib(ctx, [str(lib_dir)], "torch_cpu", "libtorch-dev")

    # The library's own build description carries TORCH_VERSION=major.minor.patch.
    lib_version = _grep(ctx, "TORCH_VERSION=[0-9]+\\.[0-9]+\\.[0-9]+", torch_cpu).replace("TORCH_VERSION=", "")
    if lib_version and lib_version.split(".")[:2] != version[:2]:
        _fail(raw or "(Debian)", "headers say %s but %s was built as TORCH_VERSION=%s: headers of one LibTorch beside the libraries of another" %
                                 (dotted, torch_cpu, lib_version))

    # c10d with Gloo: the header and the compiled backend.
    if not ctx.path(include_root + "/torch/csrc/distributed/c10d/ProcessGroupGloo.hpp").exists:
        _fail(raw or "(Debian)", "%s has no c10d headers (torch/csrc/distributed/c10d/ProcessGroupGloo.hpp): a LibTorch built without distributed support" % include_root)
    if not _grep(ctx, "createDeviceForHostname", torch_cpu):
        _fail(raw or "(Debian)", "%s has no ProcessGroupGloo: a LibTorch built without USE_DISTRIBUTED/USE_GLOO" % torch_cpu)

    # The C++ ABI: Debian's Abseil and GoogleTest use the C++11 ABI, so must LibTorch.
    c10 = find_lib(ctx, [str(lib_dir)], "c10", "libtorch-dev")
    if not _grep(ctx, "St7__cxx11", c10):
        _fail(raw or "(Debian)", "%s uses the pre-C++11 ABI (_GLIBCXX_USE_CXX11_ABI=0); shardlight's other libraries use the C++11 ABI: use a cxx11-ABI LibTorch (every torch wheel since 2.7; the 'cxx11-abi' libtorch zip)" % c10)

    # The C++ standard its headers demand (ATen/ATen.h stops below C++20 since 2.13).
    aten = ctx.read(include_root + "/ATen/ATen.h")
    cxx_standard = "c++20" if "202002L" in aten else "c++17"

    cuda = ctx.path("%s/libtorch_cuda.so" % lib_dir).exists
    return struct(
        prefix = prefix,
        debian = debian,
        include_root = include_root,
        lib_dir = lib_dir,
        version = dotted,
        lib_version = lib_version,
        cxx_standard = cxx_standard,
        cuda = cuda,
        cuda_include_dirs = _cuda_include_dirs(ctx, prefix) if cuda else [],
        cuda_lib_dirs = _cuda_lib_dirs(ctx, prefix) if cuda else [],
        peer = _peer(ctx, prefix, debian),
    )
