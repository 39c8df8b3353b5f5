// A Storage that passes every operation to another one and records what is
// read: the bytes a load takes from each file and, when asked, every range.
// Benchmarks report bytes read against bytes needed with it; tests assert
// what a load may and may not touch (e.g. a selective load never reads the
// data of keys it does not load).
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_COUNTING_STORAGE_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_COUNTING_STORAGE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "sharded/checkpoint/storage/storage.h"

namespace shardlight::sharded::checkpoint {

// One successful read: `bytes` bytes of `path` at `offset`.
struct ReadRange {
  std::string path;
  int64_t offset = 0;
  int64_t bytes = 0;
};

class CountingStorage : public Storage {
 public:
  // `base` must outlive this storage. With `keep_ranges`, every read is kept
  // (memory grows with the number of reads).
  explicit CountingStorage(Storage& base, bool keep_ranges = false) : base_(base), keep_ranges_(keep_ranges) {}

  // Bytes returned by successful reads, all files, since construction or Reset.
  int64_t bytes_read() const { return bytes_read_.load(); }
  // The reads, in the order they completed (empty without keep_ranges).
  std::vector<ReadRange> reads() const;
  void Reset();

  absl::StatusOr<std::unique_ptr<StorageFile>> OpenForRead(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<StorageFile>> CreateNew(const std::string& path) override {
    return base_.CreateNew(path);
  }
  absl::Status MakeDirectories(const std::string& dir) override { return base_.MakeDirectories(dir); }
  absl::Status SyncDirectory(const std::string& dir) override { return base_.SyncDirectory(dir); }
  absl::Status Rename(const std::string& from, const std::string& to) override { return base_.Rename(from, to); }
  absl::Status Remove(const std::string& path) override { return base_.Remove(path); }
  bool Exists(const std::string& path) override { return base_.Exists(path); }
  absl::StatusOr<std::vector<std::string>> List(const std::string& dir) override { return base_.List(dir); }
  bool RenameIsCopy(const std::string& path) override { return base_.RenameIsCopy(path); }

 private:
  class Counted;
  void Record(const std::string& path, int64_t offset, int64_t bytes);

  Storage& base_;
  const bool keep_ranges_;
  std::atomic<int64_t> bytes_read_{0};
  mutable std::mutex mu_;
  std::vector<ReadRange> reads_;  // guarded by mu_
};

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_COUNTING_STORAGE_H_
