// AWS Signature Version 4 for S3 requests, written here over OpenSSL
// (digest.h) because libcurl 7.88's CURLOPT_AWS_SIGV4 mis-signs what S3 needs:
// a valueless query parameter (`?uploads`), a `/` inside a query value, an
// unsorted query.
//
// SignV4 is the pure computation (canonical request, string to sign, signing
// key, signature), checked against AWS's published vectors in sigv4_test.cc.
// AddSigV4Authorization is what the client calls: it adds x-amz-date,
// x-amz-content-sha256 (S3 requires it), x-amz-security-token when the
// credentials carry a session token, and the Authorization header.
//
// S3's encoding rules, which differ from other services': the path is
// URI-encoded once (`/` kept, never double-encoded); query names and values
// are encoded with `/` as %2F and sorted; a parameter without a value signs
// as `name=`. Nothing here fails: a request is always signable.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_SIGV4_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_SIGV4_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace shardlight::sharded::checkpoint::s3 {

// x-amz-content-sha256 for a body that is sent but not hashed.
inline constexpr char kUnsignedPayload[] = "UNSIGNED-PAYLOAD";
// SHA-256 of nothing: the payload hash of every request without a body.
inline constexpr char kEmptyPayloadSha256[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

struct SigV4Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // AWS_SESSION_TOKEN; empty for long-term keys
};

// A request as SigV4 sees it: everything in it is signed.
struct SigV4Request {
  std::string method;  // "GET", "PUT", ...
  // Decoded ("/bucket/a key"); encoded once when signing, as it must be sent.
  std::string path = "/";
  // Decoded names and values, in any order; `?uploads` is {"uploads", ""}.
  std::vector<std::pair<std::string, std::string>> query;
  // The headers to sign, "host" among them; any case, any order.
  std::vector<std::pair<std::string, std::string>> headers;
  // Hex SHA-256 of the body, or kUnsignedPayload.
  std::string payload_hash = kEmptyPayloadSha256;
};

// Every intermediate, for tests and for debugging a SignatureDoesNotMatch.
struct SigV4Signature {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signed_headers;  // "host;x-amz-date"
  std::string signature;       // hex
  std::string authorization;   // the Authorization header's value
};

// Signs `request` exactly as given; `amz_date` is its x-amz-date
// (YYYYMMDDTHHMMSSZ), whose first eight characters date the scope.
SigV4Signature SignV4(const SigV4Request& request, const SigV4Credentials& credentials,
                      absl::string_view region, absl::string_view service, absl::string_view amz_date);

// Adds x-amz-date (from `now`), x-amz-content-sha256 (service "s3" only),
// x-amz-security-token (with a session token) and Authorization to
// `request.headers`; returns what was signed.
SigV4Signature AddSigV4Authorization(SigV4Request& request, const SigV4Credentials& credentials,
                                     absl::string_view region, absl::string_view service, absl::Time now);

// RFC 3986 percent-encoding of everything but A-Z a-z 0-9 - . _ ~ (and `/`
// when `keep_slash`), upper-case hex, as SigV4 defines it.
std::string UriEncode(absl::string_view s, bool keep_slash);

// The canonical (sorted, encoded) query string; also what the client sends,
// so the signed and the sent query are the same bytes.
std::string CanonicalQueryString(const std::vector<std::pair<std::string, std::string>>& query);

// YYYYMMDDTHHMMSSZ in UTC.
std::string AmzDate(absl::Time t);

}  // namespace shardlight::sharded::checkpoint::s3

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_SIGV4_H_
