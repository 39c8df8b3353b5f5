"""Helpers shared by the system-library repository rules in this folder.

Each rule checks that the headers and libraries exist, links the header folders
into the generated repository (so Bazel's include checking sees them as
declared), and writes its BUILD file from a template beside it, with the labels
upstream projects use, so a consumer can swap in a source build without editing
shardlight's BUILD files. A missing library fails at fetch time with the Debian
package to install.
"""

MULTIARCH_LIBS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib", "/usr/lib64"]
MULTIARCH_INCLUDES = ["/usr/include/x86_64-linux-gnu", "/usr/include/aarch64-linux-gnu", "/usr/include"]

def fail_missing(what, package, hint = ""):
    fail("shardlight: %s not found; install the Debian package '%s' (bash tools/setup.sh)%s" %
         (what, package, hint))

def require_file(ctx, path, what, package):
    if not ctx.path(path).exists:
        fail_missing(what, package)

def find_lib(ctx, dirs, name, package):
    """The path of lib<name>.so (or .a) in the first of `dirs` that has it."""
    for d in dirs:
        for ext in [".so", ".a"]:
            p = ctx.path("%s/lib%s%s" % (d, name, ext))
            if p.exists:
                return p
    fail_missing("lib%s (looked in %s)" % (name, ", ".join(dirs)), package)

def find_include_root(ctx, roots, header, package):
    """The first of `roots` that holds `header` (a path like "curl/curl.h")."""
    for r in roots:
        if ctx.path("%s/%s" % (r, header)).exists:
            return r
    fail_missing("%s (looked in %s)" % (header, ", ".join(roots)), package)

def link_headers(ctx, include_root, subdirs, package):
    """Symlinks include_root/<sub> to include/<sub> in the repository."""
    for sub in subdirs:
        src = ctx.path("%s/%s" % (include_root, sub))
        if not src.exists:
            fail_missing("headers %s" % src, package)
        ctx.symlink(src, "include/" + sub)

def lib_dir_flags(lib_dir):
    """Link flags for a library folder: none for a system folder, -L and rpath otherwise."""

    # System directories are on the default search path already; a custom
    # prefix needs both the link-time and the run-time search path.
    if str(lib_dir) in MULTIARCH_LIBS:
        return []
    return ["-L%s" % lib_dir, "-Wl,-rpath,%s" % lib_dir]

def write_build(ctx, template, substitutions = {}, path = "BUILD.bazel"):
    """Writes `path` from the template file `template` (a name in this folder) and the WORKSPACE."""
    ctx.template(path, Label("//tools/bazel/system_libs:" + template), substitutions, executable = False)
    ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % ctx.name)
