"""GoogleTest and GoogleMock from Debian's libgtest-dev and libgmock-dev (static libraries)."""

load(":common.bzl", "MULTIARCH_LIBS", "fail_missing", "link_headers", "require_file", "write_build")

def _googletest_impl(ctx):
    require_file(ctx, "/usr/include/gtest/gtest.h", "GoogleTest headers /usr/include/gtest", "libgtest-dev")
    require_file(ctx, "/usr/include/gmock/gmock.h", "GoogleMock headers /usr/include/gmock", "libgmock-dev")
    link_headers(ctx, "/usr/include", ["gtest", "gmock"], "libgtest-dev")
    for lib in ["gtest", "gtest_main", "gmock", "gmock_main"]:
        src = None
        for d in MULTIARCH_LIBS:
            p = ctx.path("%s/lib%s.a" % (d, lib))
            if p.exists:
                src = p
                break
        if src == None:
            fail_missing("lib%s.a" % lib, "libgtest-dev" if lib.startswith("gtest") else "libgmock-dev")
        ctx.symlink(src, "lib/lib%s.a" % lib)
    write_build(ctx, "googletest.BUILD.tpl")

googletest_repository = repository_rule(implementation = _googletest_impl, local = True)
