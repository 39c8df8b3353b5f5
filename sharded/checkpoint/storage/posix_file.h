// The local file system as free functions, for code that always works on
// local paths (the offline writer, the PyTorch importers, the ckpt tool): each
// is PosixStorage()'s operation of the same name (storage.h). Checkpoint save
// and load go through a Storage instead.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_POSIX_FILE_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_POSIX_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sharded/checkpoint/storage/storage.h"

namespace shardlight::sharded::checkpoint {

absl::Status MakeDirectories(const std::string& dir);
absl::Status SyncDirectory(const std::string& dir);
absl::Status RenameFile(const std::string& from, const std::string& to);
absl::Status RemoveFile(const std::string& path);
bool PathExists(const std::string& path);
absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir);
absl::StatusOr<std::string> ReadWholeFile(const std::string& path, int64_t max_bytes);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_POSIX_FILE_H_
