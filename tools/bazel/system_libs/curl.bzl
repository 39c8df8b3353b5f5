"""libcurl from Debian's libcurl4-openssl-dev: HTTP for the S3 client."""

load(":common.bzl", "MULTIARCH_INCLUDES", "MULTIARCH_LIBS", "find_include_root", "find_lib", "lib_dir_flags", "link_headers", "write_build")

def _curl_impl(ctx):
    # Debian puts curl's headers in the multiarch folder (each flavour of
    # libcurl*-dev has its own curlbuild): /usr/include/<triplet>/curl.
    root = find_include_root(ctx, MULTIARCH_INCLUDES, "curl/curl.h", "libcurl4-openssl-dev")
    link_headers(ctx, root, ["curl"], "libcurl4-openssl-dev")
    lib = find_lib(ctx, MULTIARCH_LIBS, "curl", "libcurl4-openssl-dev")
    write_build(ctx, "curl.BUILD.tpl", {"%{linkopts}": repr(lib_dir_flags(lib.dirname) + ["-lcurl"])})

curl_repository = repository_rule(implementation = _curl_impl, local = True)
