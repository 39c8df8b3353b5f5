// Thin POSIX file helpers for checkpoint I/O: every failure is an absl::Status
// that names the path and the system error, so a checkpoint error tells the
// user which file is at fault.
//
// Reads and writes loop over short transfers; a read that meets the end of
// the file is OutOfRange ("ends at byte N"), which callers report as a
// truncated file.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_POSIX_FILE_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_POSIX_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardlight::sharded::checkpoint {

class File {
 public:
  static absl::StatusOr<File> OpenForRead(const std::string& path);
  // Fails with AlreadyExists if `path` exists: writers never clobber.
  static absl::StatusOr<File> CreateNew(const std::string& path);

  File() = default;
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  bool is_open() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

  absl::StatusOr<int64_t> Size() const;
  absl::Status ReadAt(void* buffer, int64_t n, int64_t offset) const;
  absl::Status WriteAt(const void* buffer, int64_t n, int64_t offset);
  // fsync: the data and the size are durable once it returns.
  absl::Status Sync();
  absl::Status Close();

 private:
  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

// An error status for errno `error` from `op` on `path`.
absl::Status PosixError(int error, const std::string& op, const std::string& path);

std::string JoinPath(const std::string& dir, const std::string& name);
// mkdir -p; an existing directory is fine.
absl::Status MakeDirectories(const std::string& dir);
// fsync of a directory, making renames and creations in it durable.
absl::Status SyncDirectory(const std::string& dir);
// rename(2): atomic replacement of `to`.
absl::Status RenameFile(const std::string& from, const std::string& to);
// unlink(2); a missing file is fine.
absl::Status RemoveFile(const std::string& path);
bool PathExists(const std::string& path);
// Plain names in `dir` (no "." or ".."), unsorted.
absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir);
// The whole file, refusing (before allocating) one larger than `max_bytes`.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path, int64_t max_bytes);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_POSIX_FILE_H_
