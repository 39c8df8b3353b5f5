#include "sharded/checkpoint/storage/fault_injecting_storage.h"

#include <utility>

#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {

const char* StorageOpName(StorageOp op) {
  switch (op) {
    case StorageOp::kOpenForRead: return "open";
    case StorageOp::kCreateNew: return "create";
    case StorageOp::kRead: return "read";
    case StorageOp::kWrite: return "write";
    case StorageOp::kSync: return "fsync";
    case StorageOp::kClose: return "close";
    case StorageOp::kMakeDirectories: return "mkdir";
    case StorageOp::kSyncDirectory: return "fsync directory";
    case StorageOp::kRename: return "rename";
    case StorageOp::kRemove: return "remove";
    case StorageOp::kList: return "list";
  }
  return "?";
}

// A file whose every operation asks the fault function first.
class FaultInjectingStorage::Faulty : public StorageFile {
 public:
  Faulty(std::unique_ptr<StorageFile> base, std::string path, const StorageFault* fault)
      : base_(std::move(base)), path_(std::move(path)), fault_(fault) {}
  absl::StatusOr<int64_t> Size() const override { return base_->Size(); }
  absl::Status ReadAt(void* buffer, int64_t n, int64_t offset) const override {
    SL_RETURN_IF_ERROR((*fault_)(StorageOp::kRead, path_));
    return base_->ReadAt(buffer, n, offset);
  }
  absl::Status WriteAt(const void* buffer, int64_t n, int64_t offset) override {
    SL_RETURN_IF_ERROR((*fault_)(StorageOp::kWrite, path_));
    return base_->WriteAt(buffer, n, offset);
  }
  absl::Status Sync() override {
    SL_RETURN_IF_ERROR((*fault_)(StorageOp::kSync, path_));
    return base_->Sync();
  }
  absl::Status Close() override {
    SL_RETURN_IF_ERROR((*fault_)(StorageOp::kClose, path_));
    return base_->Close();
  }
  void WillRead(std::vector<ByteRange> ranges) const override { base_->WillRead(std::move(ranges)); }

 private:
  std::unique_ptr<StorageFile> base_;
  std::string path_;
  const StorageFault* fault_;
};

absl::StatusOr<std::unique_ptr<StorageFile>> FaultInjectingStorage::OpenForRead(const std::string& path) {
  SL_RETURN_IF_ERROR(fault_(StorageOp::kOpenForRead, path));
  SL_ASSIGN_OR_RETURN(std::unique_ptr<StorageFile> file, base_.OpenForRead(path));
  return std::make_unique<Faulty>(std::move(file), path, &fault_);
}

absl::StatusOr<std::unique_ptr<StorageFile>> FaultInjectingStorage::CreateNew(const std::string& path) {
  SL_RETURN_IF_ERROR(fault_(StorageOp::kCreateNew, path));
  SL_ASSIGN_OR_RETURN(std::unique_ptr<StorageFile> file, base_.CreateNew(path));
  return std::make_unique<Faulty>(std::move(file), path, &fault_);
}

absl::Status FaultInjectingStorage::MakeDirectories(const std::string& dir) {
  SL_RETURN_IF_ERROR(fault_(StorageOp::kMakeDirectories, dir));
  return base_.MakeDirectories(dir);
}

absl::Status FaultInjectingStorage::SyncDirectory(const std::string& dir) {
  SL_RETURN_IF_ERROR(fault_(StorageOp::kSyncDirectory, dir));
  return base_.SyncDirectory(dir);
}

absl::Status FaultInjectingStorage::Rename(const std::string& from, const std::string& to) {
  SL_RETURN_IF_ERROR(fault_(StorageOp::kRename, from));
  return base_.Rename(from, to);
}

absl::Status FaultInjectingStorage::Remove(const std::string& path) {
  SL_RETURN_IF_ERROR(fault_(StorageOp::kRemove, path));
  return base_.Remove(path);
}

absl::StatusOr<std::vector<std::string>> FaultInjectingStorage::List(const std::string& dir) {
  SL_RETURN_IF_ERROR(fault_(StorageOp::kList, dir));
  return base_.List(dir);
}

}  // namespace shardlight::sharded::checkpoint
