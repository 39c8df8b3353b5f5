// S3Storage: the storage seam (../storage.h) over S3, for checkpoints at
// s3://bucket/prefix locations. Paths are "s3://bucket/key"; a "directory"
// is a key prefix ending in "/".
//
// How the seam's operations map onto an object store that has no rename,
// no directories and no partial writes:
//   CreateNew    a writer that buffers and uploads front to back (parts of
//                S3StorageOptions::part_bytes as they fill, multipart), and
//                makes the object appear only at Sync/Close, with
//                If-None-Match: * -- the seam's exclusive create, enforced by
//                the server even against a racing writer (AlreadyExists).
//                Parts upload on their own threads, parts_in_flight at a
//                time. Until then nothing is visible; a writer dropped before
//                Close uploads what it has (the seam closes on destruction);
//                one whose upload fails aborts its multipart upload. A write
//                behind bytes already uploaded is FailedPrecondition
//                (checkpoint files are written front to back).
//   Rename       a server-side CopyObject onto `to` (an atomic replacement:
//                a reader sees the old object or the new, never a mix), then
//                a delete of `from`. A crash between the two leaves `from`
//                as well, which the save's stale-file cleanup removes.
//   OpenForRead  a HEAD, then ranged GETs. A load hints each data file with
//                exactly the byte ranges its rank's shards overlap
//                (File::WillRead); those are joined across small gaps,
//                fetched ahead in pieces, several GETs in flight, and the
//                reads served from them.
//   SyncDirectory  nothing: an object is durable when its upload returns.
//   MakeDirectories  an empty marker object "<dir>/", so an empty directory
//                exists and lists as POSIX's would; files need no parents.
//   List, Exists, Remove  ListObjectsV2 with delimiter "/", HEAD, DELETE;
//                Remove refuses a directory that still holds entries.
//                Exists is false only when the server says 404; an error
//                (credentials, clock, server gone) counts as there, so the
//                caller's open reports that error instead of "missing".
//
// The save protocol asks RenameIsCopy() (true here) and then avoids the
// copies: each rank's data file is uploaded under its final name, unique to
// the save, and rank 0 creates index.json with If-None-Match: * -- the
// commit point, one request, which a racing save cannot overwrite. Only a
// save into a location that already holds an index replaces it by
// CopyObject (atomic for readers). A checkpoint root's `latest` is replaced
// that way too.
//
// Errors are the S3 client's (s3_client.h), prefixed with what the seam was
// doing and the s3:// path; a missing object is NotFound as ENOENT is.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_S3_STORAGE_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_S3_STORAGE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sharded/checkpoint/storage/s3/s3_client.h"
#include "sharded/checkpoint/storage/storage.h"

namespace shardlight::sharded::checkpoint::s3 {

struct S3StorageOptions {
  // Multipart part size for large files (S3: at least 5 MiB, at most 10000
  // parts, so 16 MiB parts cover files up to 156 GiB).
  int64_t part_bytes = int64_t{16} << 20;
  // Parts of one file uploading at once, each on its own thread.
  int parts_in_flight = 4;
  // Reads after a File::WillRead hint: the hinted ranges are fetched ahead
  // by ranged GETs of at most `read_piece_bytes`, `reads_in_flight` held
  // (fetched or fetching) at a time per open file. Ranges at most
  // `read_join_gap_bytes` apart share a GET (read_ranges.h): a load of many
  // small entries, whose ranges a rank's file interleaves with entries it
  // does not need, then makes a GET per few MiB instead of one per entry.
  // A GET's round trip costs more than reading this many bytes more
  // (loopback: ~1 ms against ~1 MiB; AWS: tens of ms against some MiB).
  int64_t read_piece_bytes = int64_t{8} << 20;
  int64_t read_join_gap_bytes = int64_t{1} << 20;
  int reads_in_flight = 8;
};

// Whether `path` is an s3:// location.
bool IsS3Path(absl::string_view path);

struct S3Path {
  std::string bucket;
  std::string key;  // no leading or trailing '/'; empty for the bucket itself
};
// InvalidArgument naming `path` unless it is s3://bucket[/key].
absl::StatusOr<S3Path> ParseS3Path(absl::string_view path);

class S3Storage : public Storage {
 public:
  explicit S3Storage(std::shared_ptr<S3Client> client, S3StorageOptions options = {});
  // A client configured from the AWS_* variables (s3_config.h).
  static absl::StatusOr<std::shared_ptr<S3Storage>> FromEnvironment(S3StorageOptions options = {});

  absl::StatusOr<std::unique_ptr<StorageFile>> OpenForRead(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<StorageFile>> CreateNew(const std::string& path) override;
  absl::Status MakeDirectories(const std::string& dir) override;
  absl::Status SyncDirectory(const std::string& dir) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::Status Remove(const std::string& path) override;
  bool Exists(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> List(const std::string& dir) override;
  bool RenameIsCopy(const std::string&) override { return true; }

  S3Client& client() { return *client_; }

 private:
  std::shared_ptr<S3Client> client_;
  S3StorageOptions options_;
};

}  // namespace shardlight::sharded::checkpoint::s3

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_S3_STORAGE_H_
