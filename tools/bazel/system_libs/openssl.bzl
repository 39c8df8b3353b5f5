"""OpenSSL's libcrypto and libssl from Debian's libssl-dev, with BoringSSL's labels (:crypto, :ssl)."""

load(":common.bzl", "MULTIARCH_INCLUDES", "MULTIARCH_LIBS", "find_include_root", "find_lib", "lib_dir_flags", "link_headers", "require_file", "write_build")

def _openssl_impl(ctx):
    require_file(ctx, "/usr/include/openssl/evp.h", "OpenSSL headers /usr/include/openssl", "libssl-dev")
    link_headers(ctx, "/usr/include", ["openssl"], "libssl-dev")

    # configuration.h (and opensslconf.h's other half) is per architecture:
    # /usr/include/<triplet>/openssl, a second include root for the same
    # <openssl/...> names.
    arch_root = find_include_root(ctx, [d for d in MULTIARCH_INCLUDES if d != "/usr/include"] + ["/usr/include"], "openssl/configuration.h", "libssl-dev")
    if arch_root != "/usr/include":
        ctx.symlink(ctx.path(arch_root + "/openssl"), "arch_include/openssl")
    crypto = find_lib(ctx, MULTIARCH_LIBS, "crypto", "libssl-dev")
    find_lib(ctx, [str(crypto.dirname)], "ssl", "libssl-dev")
    write_build(ctx, "openssl.BUILD.tpl", {"%{lib_dir_flags}": repr(lib_dir_flags(crypto.dirname))})

openssl_repository = repository_rule(implementation = _openssl_impl, local = True)
