// The digests S3 requests need, over OpenSSL's libcrypto: SHA-256 (SigV4's
// hashes and x-amz-content-sha256), HMAC-SHA256 (SigV4's signing key and
// signature) and MD5 (an object's ETag, to recognise our own earlier write).
// None of them fails on valid input; OpenSSL failing is a broken install, and
// aborts with the reason rather than signing with garbage.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_DIGEST_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_DIGEST_H_

#include <string>

#include "absl/strings/string_view.h"

namespace shardlight::sharded::checkpoint::s3 {

// Lower-case hexadecimal of raw bytes.
std::string HexEncode(absl::string_view bytes);

// The 32 raw bytes of SHA-256(data), and their hex.
std::string Sha256(absl::string_view data);
std::string Sha256Hex(absl::string_view data);

// The 32 raw bytes of HMAC-SHA256 keyed by `key`.
std::string HmacSha256(absl::string_view key, absl::string_view data);

// The hex of MD5(data): what S3 reports as the ETag of a single-part object.
std::string Md5Hex(absl::string_view data);

}  // namespace shardlight::sharded::checkpoint::s3

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_DIGEST_H_
