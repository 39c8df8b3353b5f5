// A Storage that keeps files in memory: checkpoints in tests without a
// directory, and a second implementation that keeps the interface honest.
// Paths are plain strings; a directory exists once created (MakeDirectories)
// and lists the files and directories whose path is "dir/name"; Remove takes
// a file or an empty directory. Sync and SyncDirectory do
// nothing (memory is as durable as it gets); errors read like PosixStorage's.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_IN_MEMORY_STORAGE_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_IN_MEMORY_STORAGE_H_

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "sharded/checkpoint/storage/storage.h"

namespace shardlight::sharded::checkpoint {

class InMemoryStorage : public Storage {
 public:
  absl::StatusOr<std::unique_ptr<StorageFile>> OpenForRead(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<StorageFile>> CreateNew(const std::string& path) override;
  absl::Status MakeDirectories(const std::string& dir) override;
  absl::Status SyncDirectory(const std::string& dir) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::Status Remove(const std::string& path) override;
  bool Exists(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> List(const std::string& dir) override;

  // The paths of all files, sorted.
  std::vector<std::string> Paths() const;

 private:
  class MemoryFile;
  using Bytes = std::shared_ptr<std::string>;  // shared by the open handles

  mutable std::mutex mu_;
  std::map<std::string, Bytes> files_;
  std::set<std::string> dirs_;
};

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_IN_MEMORY_STORAGE_H_
