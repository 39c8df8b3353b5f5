// A Storage that runs a test's fault function before each operation of
// another Storage: a non-OK status fails that operation, and the function may
// throw to stand for an exception at that point. Faults are placed by what a
// save or load does (the operation and the path it touches), not by stages of
// the implementation: e.g. failing kSync of a temporary data file is "this
// rank's data could not be made durable", failing kSyncDirectory after
// index.json was renamed is "the commit may not be durable".
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_FAULT_INJECTING_STORAGE_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_FAULT_INJECTING_STORAGE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sharded/checkpoint/storage/storage.h"

namespace shardlight::sharded::checkpoint {

enum class StorageOp {
  kOpenForRead, kCreateNew, kRead, kWrite, kSync, kClose,
  kMakeDirectories, kSyncDirectory, kRename, kRemove, kList,
};
const char* StorageOpName(StorageOp op);

// `path` is the file or directory the operation is on (for kRename, the
// source). Called from any rank's thread.
using StorageFault = std::function<absl::Status(StorageOp op, const std::string& path)>;

class FaultInjectingStorage : public Storage {
 public:
  // `base` must outlive this storage.
  FaultInjectingStorage(Storage& base, StorageFault fault) : base_(base), fault_(std::move(fault)) {}

  absl::StatusOr<std::unique_ptr<StorageFile>> OpenForRead(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<StorageFile>> CreateNew(const std::string& path) override;
  absl::Status MakeDirectories(const std::string& dir) override;
  absl::Status SyncDirectory(const std::string& dir) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::Status Remove(const std::string& path) override;
  bool Exists(const std::string& path) override { return base_.Exists(path); }
  bool RenameIsCopy(const std::string& path) override { return base_.RenameIsCopy(path); }
  absl::StatusOr<std::vector<std::string>> List(const std::string& dir) override;

 private:
  class Faulty;
  Storage& base_;
  StorageFault fault_;
};

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_FAULT_INJECTING_STORAGE_H_
