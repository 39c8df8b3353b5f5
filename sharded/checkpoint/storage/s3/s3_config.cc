#include "sharded/checkpoint/storage/s3/s3_config.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace shardlight::sharded::checkpoint::s3 {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// Splits "http(s)://host[:port][/]" into scheme and authority.
absl::Status ParseEndpoint(absl::string_view url, std::string* scheme, std::string* authority) {
  absl::string_view rest = url;
  if (absl::ConsumePrefix(&rest, "http://")) {
    *scheme = "http";
  } else if (absl::ConsumePrefix(&rest, "https://")) {
    *scheme = "https";
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("S3 endpoint '", url, "' is not http://host[:port] or https://host[:port]"));
  }
  absl::ConsumeSuffix(&rest, "/");
  if (rest.empty() || absl::StrContains(rest, "/") || absl::StrContains(rest, "?")) {
    return absl::InvalidArgumentError(absl::StrCat("S3 endpoint '", url, "' must be scheme://host[:port] with no path"));
  }
  *authority = std::string(rest);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<S3Config> S3ConfigFromEnvironment() {
  S3Config config;
  config.credentials.access_key_id = Env("AWS_ACCESS_KEY_ID");
  config.credentials.secret_access_key = Env("AWS_SECRET_ACCESS_KEY");
  config.credentials.session_token = Env("AWS_SESSION_TOKEN");
  for (const char* name : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}) {
    if (Env(name).empty()) {
      return absl::InvalidArgumentError(absl::StrCat("S3: ", name, " is not set (S3 needs AWS_ACCESS_KEY_ID and ",
                                                     "AWS_SECRET_ACCESS_KEY; AWS_SESSION_TOKEN, AWS_REGION and ",
                                                     "AWS_ENDPOINT_URL are optional)"));
    }
  }
  for (const char* name : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    if (!Env(name).empty()) {
      config.region = Env(name);
      break;
    }
  }
  // The service-specific variable wins, as in the AWS SDKs.
  config.endpoint_url = !Env("AWS_ENDPOINT_URL_S3").empty() ? Env("AWS_ENDPOINT_URL_S3") : Env("AWS_ENDPOINT_URL");
  if (!config.endpoint_url.empty()) {
    std::string scheme, authority;
    if (absl::Status s = ParseEndpoint(config.endpoint_url, &scheme, &authority); !s.ok()) return s;
  }
  return config;
}

absl::StatusOr<S3Endpoint> EndpointForService(const S3Config& config) {
  S3Endpoint e;
  if (config.endpoint_url.empty()) {
    e.host = absl::StrCat("s3.", config.region, ".amazonaws.com");
    e.origin = absl::StrCat("https://", e.host);
    return e;
  }
  std::string scheme;
  if (absl::Status s = ParseEndpoint(config.endpoint_url, &scheme, &e.host); !s.ok()) return s;
  e.origin = absl::StrCat(scheme, "://", e.host);
  return e;
}

absl::StatusOr<S3Endpoint> EndpointForBucket(const S3Config& config, absl::string_view bucket) {
  if (bucket.empty()) return absl::InvalidArgumentError("S3: empty bucket name");
  if (config.endpoint_url.empty()) {
    S3Endpoint e;
    e.host = absl::StrCat(bucket, ".s3.", config.region, ".amazonaws.com");
    e.origin = absl::StrCat("https://", e.host);
    return e;
  }
  absl::StatusOr<S3Endpoint> e = EndpointForService(config);
  if (e.ok()) e->path_prefix = absl::StrCat("/", bucket);
  return e;
}

}  // namespace shardlight::sharded::checkpoint::s3
