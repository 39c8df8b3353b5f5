// The staging area of an asynchronous save (async_checkpointer.h): equal
// slots, together at most a budget of host memory, that the snapshot side
// (the training thread) fills with copies of the entries' bytes and the
// writer side (the background save) drains in order, as an EntryByteSource.
//
// Bounded: when every slot holds bytes not yet written, Stage blocks until
// the writer releases one, so a state larger than the budget holds training
// back only until the part that does not fit has been written. A slot is
// reused only after the writer's Release: never while a write reads it.
// Slots are allocated on first use and kept for the next save (the memory a
// checkpointer holds is at most the budget).
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_STAGING_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_STAGING_H_

#include <ATen/ATen.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sharded/checkpoint/data_file.h"

namespace shardlight::sharded::checkpoint {

class StagingArea : public EntryByteSource {
 public:
  // The smallest budget: four slots of the smallest piece.
  static constexpr int64_t kMinBudgetBytes = int64_t{64} << 10;

  // `budget_bytes` >= kMinBudgetBytes (the caller checks).
  explicit StagingArea(int64_t budget_bytes);

  int64_t piece_bytes() const { return piece_bytes_; }
  // Slot memory allocated so far: the extra host memory staging holds.
  int64_t allocated_bytes() const;

  // Starts a save: nothing queued, every slot free, no abort. Only while no
  // writer reads from this area.
  void Reset();
  // Producer: copies `tensor`'s row-major bytes, as pieces of entry `entry`,
  // into free slots (blocking while there is none). Returns the abort
  // reason once the area is aborted, or the copy's error.
  absl::Status Stage(size_t entry, const at::Tensor& tensor);
  // Either side: Stage and Next return `why` from now on (the first reason
  // sticks); a blocked peer wakes up.
  void Abort(const absl::Status& why);

  absl::StatusOr<Piece> Next(size_t entry) override;
  void Release() override;

 private:
  struct Queued {
    size_t entry;
    int slot;
    int64_t size;
  };
  // Waits for a free slot (allocating one while under the budget).
  absl::StatusOr<int> AcquireSlot();
  void Push(size_t entry, int slot, int64_t size);

  const int64_t piece_bytes_;
  const int max_slots_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::unique_ptr<char[]>> slots_;  // guarded by mu_
  std::vector<int> free_;                       // guarded by mu_
  std::deque<Queued> queued_;                   // guarded by mu_
  int reading_ = -1;                            // the slot the writer holds; guarded by mu_
  absl::Status aborted_;                        // guarded by mu_
};

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_STAGING_H_
