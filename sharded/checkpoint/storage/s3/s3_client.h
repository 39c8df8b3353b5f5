// An S3 client for checkpoints: the object operations a save, a load and
// their clean-up need, over libcurl (curl_http.h) with SigV4 (sigv4.h).
//
// Every operation retries with exponential backoff and jitter what may pass
// on its own: a dropped, refused or stalled connection, HTTP 500/502/503/504,
// SlowDown, InternalError, RequestTimeout, and 409 ConditionalRequestConflict
// (a conditional write that raced another in flight, which AWS says to
// retry), all within S3ClientOptions::deadline; the operation then fails
// Unavailable (or DeadlineExceeded) with the last error. Nothing else is
// retried. Errors name the operation, s3://bucket/key and S3's error code
// and message, and map to absl codes:
//   NotFound            NoSuchKey, NoSuchBucket, NoSuchUpload (HTTP 404)
//   PermissionDenied    AccessDenied, InvalidAccessKeyId,
//                       SignatureDoesNotMatch, RequestTimeTooSkewed (403)
//   FailedPrecondition  PreconditionFailed (412) only: an If-None-Match: *
//                       write found the key taken
//   AlreadyExists       BucketAlreadyOwnedByYou, BucketAlreadyExists (409)
//   OutOfRange          InvalidRange (416)
//   InvalidArgument     other 4xx (EntityTooSmall, InvalidPart, ...)
//   Unavailable         5xx and transport failures, once retries are spent
//
// Payloads are signed with their real SHA-256 (x-amz-content-sha256), so
// the server rejects a body damaged in transit; S3ClientOptions::
// unsigned_payload trades that for one fewer pass over the bytes.
//
// A conditional write retried after a dropped connection may find its own
// first attempt already there: a 412 on a retry is checked against the
// object's ETag (the MD5 of what we sent, or of the parts for multipart) and
// counts as success when it matches.
//
// Thread-safe: one client serves every thread of a process. With
// SHARDLIGHT_S3_TRACE set, each attempt goes to stderr: when it started
// (Unix seconds), how long it took, its method, URL and status, and the
// bytes it moved.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_S3_CLIENT_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_S3_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "sharded/checkpoint/storage/s3/curl_http.h"
#include "sharded/checkpoint/storage/s3/s3_config.h"

namespace shardlight::sharded::checkpoint::s3 {

struct S3ClientOptions {
  // Bound on one operation, all its attempts, transfers and backoffs
  // included: large objects go in parts and ranges, each its own operation.
  absl::Duration deadline = absl::Minutes(2);
  int max_attempts = 8;
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration stall_timeout = absl::Seconds(30);
  bool unsigned_payload = false;
  // Added to this machine's clock when signing: for a machine whose clock is
  // known to be off (S3 refuses signatures over 15 minutes from its time,
  // RequestTimeTooSkewed).
  absl::Duration clock_offset = absl::ZeroDuration();
};

struct ObjectInfo {
  std::string key;
  int64_t size = 0;
  std::string etag;  // without the quotes
};

struct ListObjectsResult {
  std::vector<ObjectInfo> objects;         // sorted by key, as S3 lists them
  std::vector<std::string> common_prefixes; // with a delimiter: the "folders"
};

struct CompletedPart {
  int part_number = 0;
  std::string etag;  // as UploadPart returned it
};

struct MultipartUpload {
  std::string key;
  std::string upload_id;
  std::string initiated;  // ISO 8601, as S3 gives it
};

class S3Client {
 public:
  static std::unique_ptr<S3Client> Create(S3Config config, S3ClientOptions options = {});

  const S3Config& config() const { return config_; }

  // GET / : the buckets these credentials own.
  absl::StatusOr<std::vector<std::string>> ListBuckets();
  absl::Status CreateBucket(const std::string& bucket);

  // The new object's ETag. With `if_none_match`, fails FailedPrecondition
  // when `key` exists (S3 conditional write: exactly one of several racing
  // writers wins).
  absl::StatusOr<std::string> PutObject(const std::string& bucket, const std::string& key, absl::string_view body,
                                        bool if_none_match = false);
  absl::StatusOr<std::string> GetObject(const std::string& bucket, const std::string& key);
  // Bytes [offset, offset + n) into `buffer`; returns how many came, fewer
  // than n only where the object ends first. OutOfRange when offset is at or
  // past the end.
  absl::StatusOr<int64_t> GetObjectRange(const std::string& bucket, const std::string& key, int64_t offset,
                                         int64_t n, void* buffer);
  absl::StatusOr<ObjectInfo> HeadObject(const std::string& bucket, const std::string& key);
  // Every key under `prefix`, following continuation tokens; `page_size`
  // bounds one response (S3's max-keys, at most 1000); a positive `limit`
  // stops once that many keys and prefixes have come.
  absl::StatusOr<ListObjectsResult> ListObjects(const std::string& bucket, const std::string& prefix,
                                                const std::string& delimiter = "", int page_size = 1000,
                                                int limit = 0);
  // A server-side copy, atomically replacing `to_key` (objects over 5 GiB
  // are copied in parts, and appear at once on completion).
  absl::Status CopyObject(const std::string& bucket, const std::string& from_key, const std::string& to_key);
  // A missing key is fine (S3 answers 204 either way).
  absl::Status DeleteObject(const std::string& bucket, const std::string& key);

  // Multipart: parts of at least 5 MiB (the last may be smaller), numbered
  // from 1; Complete with `if_none_match` commits only if `key` is free.
  absl::StatusOr<std::string> CreateMultipartUpload(const std::string& bucket, const std::string& key);
  absl::StatusOr<std::string> UploadPart(const std::string& bucket, const std::string& key,
                                         const std::string& upload_id, int part_number, absl::string_view body);
  absl::StatusOr<std::string> CompleteMultipartUpload(const std::string& bucket, const std::string& key,
                                                      const std::string& upload_id,
                                                      const std::vector<CompletedPart>& parts,
                                                      bool if_none_match = false);
  absl::Status AbortMultipartUpload(const std::string& bucket, const std::string& key,
                                    const std::string& upload_id);
  // Unfinished uploads under `prefix` (what a crashed save leaves).
  absl::StatusOr<std::vector<MultipartUpload>> ListMultipartUploads(const std::string& bucket,
                                                                    const std::string& prefix);

 private:
  struct Call;  // one S3 operation: its request and how to describe it
  S3Client(S3Config config, S3ClientOptions options);
  // Signs, sends and retries; returns the final 2xx response, or the error.
  absl::StatusOr<HttpResponse> Send(const Call& call);
  // After a 412 on a retried conditional write: whether the object there is
  // the one this call wrote (its ETag is `expected_etag`).
  bool IsOurs(const Call& call, const std::string& expected_etag);

  S3Config config_;
  S3ClientOptions options_;
  const bool trace_;
  CurlHttp http_;
};

// "s3://bucket/key", for messages.
std::string S3Url(absl::string_view bucket, absl::string_view key);

}  // namespace shardlight::sharded::checkpoint::s3

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_S3_CLIENT_H_
