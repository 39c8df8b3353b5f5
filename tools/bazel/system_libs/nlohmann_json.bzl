"""nlohmann/json (header-only) from Debian's nlohmann-json3-dev."""

load(":common.bzl", "link_headers", "require_file", "write_build")

def _nlohmann_json_impl(ctx):
    require_file(ctx, "/usr/include/nlohmann/json.hpp", "nlohmann/json.hpp", "nlohmann-json3-dev")
    link_headers(ctx, "/usr/include", ["nlohmann"], "nlohmann-json3-dev")
    write_build(ctx, "nlohmann_json.BUILD.tpl")

nlohmann_json_repository = repository_rule(implementation = _nlohmann_json_impl, local = True)
