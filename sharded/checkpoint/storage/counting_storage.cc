#include "sharded/checkpoint/storage/counting_storage.h"

#include <utility>

#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {

// A file whose successful reads are recorded by its storage.
class CountingStorage::Counted : public StorageFile {
 public:
  Counted(std::unique_ptr<StorageFile> base, std::string path, CountingStorage* owner)
      : base_(std::move(base)), path_(std::move(path)), owner_(owner) {}
  absl::StatusOr<int64_t> Size() const override { return base_->Size(); }
  absl::Status ReadAt(void* buffer, int64_t n, int64_t offset) const override {
    SL_RETURN_IF_ERROR(base_->ReadAt(buffer, n, offset));
    owner_->Record(path_, offset, n);
    return absl::OkStatus();
  }
  absl::Status WriteAt(const void* buffer, int64_t n, int64_t offset) override {
    return base_->WriteAt(buffer, n, offset);
  }
  absl::Status Sync() override { return base_->Sync(); }
  absl::Status Close() override { return base_->Close(); }
  void WillRead(std::vector<ByteRange> ranges) const override { base_->WillRead(std::move(ranges)); }

 private:
  std::unique_ptr<StorageFile> base_;
  std::string path_;
  CountingStorage* owner_;
};

absl::StatusOr<std::unique_ptr<StorageFile>> CountingStorage::OpenForRead(const std::string& path) {
  SL_ASSIGN_OR_RETURN(std::unique_ptr<StorageFile> file, base_.OpenForRead(path));
  return std::make_unique<Counted>(std::move(file), path, this);
}

void CountingStorage::Record(const std::string& path, int64_t offset, int64_t bytes) {
  bytes_read_ += bytes;
  if (!keep_ranges_) return;
  std::lock_guard<std::mutex> lock(mu_);
  reads_.push_back({path, offset, bytes});
}

std::vector<ReadRange> CountingStorage::reads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reads_;
}

void CountingStorage::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  bytes_read_ = 0;
  reads_.clear();
}

}  // namespace shardlight::sharded::checkpoint
