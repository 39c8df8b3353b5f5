// Where an S3 client sends its requests and as whom: configured as the AWS
// tools are, from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
// AWS_REGION (or AWS_DEFAULT_REGION; us-east-1 when neither is set) and
// AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (a custom endpoint such as MinIO,
// Ceph RGW or SeaweedFS, addressed path-style: <endpoint>/<bucket>/<key>).
// Without an endpoint, requests go to AWS, virtual-hosted style
// (https://<bucket>.s3.<region>.amazonaws.com/<key>).
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_S3_CONFIG_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_S3_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sharded/checkpoint/storage/s3/sigv4.h"

namespace shardlight::sharded::checkpoint::s3 {

struct S3Config {
  SigV4Credentials credentials;
  std::string region = "us-east-1";
  // "http://127.0.0.1:8333" (scheme, host, optional port; no path). Empty:
  // AWS itself.
  std::string endpoint_url;
};

// The configuration from the process environment. InvalidArgument naming the
// variable when AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY is missing, or the
// endpoint is not http(s)://host[:port].
absl::StatusOr<S3Config> S3ConfigFromEnvironment();

// Where one request goes: a request's URL is origin + the encoded
// path_prefix + "/" + key; `host` is the Host header that is signed (curl
// sends the same).
struct S3Endpoint {
  std::string origin;       // "http://127.0.0.1:8333" or "https://bucket.s3.us-east-1.amazonaws.com"
  std::string host;         // "127.0.0.1:8333" or "bucket.s3.us-east-1.amazonaws.com"
  std::string path_prefix;  // "/bucket" for path-style, "" otherwise
};
// For requests on `bucket` and its objects.
absl::StatusOr<S3Endpoint> EndpointForBucket(const S3Config& config, absl::string_view bucket);
// For requests on the service itself (ListBuckets).
absl::StatusOr<S3Endpoint> EndpointForService(const S3Config& config);

}  // namespace shardlight::sharded::checkpoint::s3

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_S3_CONFIG_H_
