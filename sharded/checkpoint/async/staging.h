// The staging area of an asynchronous save (async_checkpointer.h): equal
// slots, together at most a budget of host memory, that the snapshot side
// (the training thread) fills with copies of the entries' bytes and the
// writer side (the background save) drains in order, as an EntryByteSource.
//
// Packed: consecutive entries share a slot (each piece starts 64-byte
// aligned), so a state of many small tensors needs about its own size in
// slots, not a slot per tensor.
//
// The writer drains only once the snapshot is sealed, or from the first time
// the producer waits for room on: a snapshot that fits the budget is copied
// without the writer's checksums and writes competing for the cores.
//
// Bounded: when every slot holds bytes not yet written, Stage blocks until
// the writer releases one, so a state larger than the budget holds training
// back only until the part that does not fit has been written. A slot is
// reused only once the writer has released every piece in it and the
// producer has moved on: never while a write reads it.
//
// Slots are allocated on first use, or ahead of it by Reserve, and kept for
// the next save (the memory a checkpointer holds is at most the budget).
// Reserve also writes every page of what it allocates: first touches of
// fresh memory cost far more than a copy into resident memory (about
// 90 MiB/s per thread against several GiB/s on a VM), so a save copies into
// resident slots and the training thread pays only the copy.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_ASYNC_STAGING_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_ASYNC_STAGING_H_

#include <ATen/ATen.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sharded/checkpoint/format/data_file.h"

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
  // The slot memory a snapshot of tensors of these byte sizes fills, packed
  // (at most the budget is ever allocated).
  int64_t PackedBytes(const std::vector<int64_t>& entry_bytes) const;
  // Allocates slots, each written once so its pages are resident, until the
  // area holds min(bytes, budget) (rounded up to whole slots; a last partial
  // slot is touched only as far as `bytes` reaches). Thread-safe; may run
  // beside a save (a slot it adds is free for the producer at once).
  void Reserve(int64_t bytes);

  // Starts a save: nothing queued, every slot free, no abort. Only while no
  // writer reads from this area.
  void Reset();
  // Producer: copies `tensor`'s row-major bytes, as pieces of entry `entry`,
  // into slots (blocking while none has room). Returns the abort reason once
  // the area is aborted, or the copy's error.
  absl::Status Stage(size_t entry, const at::Tensor& tensor);
  // Producer: Stage(i, tensors[i]) for each i in order, reading ahead of the
  // copy (the next tensors' headers) so that a snapshot of many small tensors
  // costs about their bytes, not a cache miss per tensor field.
  absl::Status StageAll(const std::vector<at::Tensor>& tensors);
  // Producer: the slot memory this save's snapshot has filled so far, packed
  // as PackedBytes counts it (after the last Stage: the whole snapshot's).
  int64_t staged_bytes() const;
  // Producer: the snapshot is complete (every entry staged).
  void Seal();
  // Writer: blocks until Next may return pieces -- the snapshot is sealed,
  // the producer has had to wait for room, or the area is aborted.
  void WaitUntilDraining();
  // Either side: Stage and Next return `why` from now on (the first reason
  // sticks); a blocked peer wakes up.
  void Abort(const absl::Status& why);

  absl::StatusOr<Piece> Next(size_t entry) override;
  void Release() override;

 private:
  struct FreeMemory {
    void operator()(char* p) const;
  };
  struct Slot {
    std::unique_ptr<char, FreeMemory> memory;  // 64-byte aligned
    int holds = 0;  // pieces queued or being written in it, + 1 while the producer fills it
  };
  struct Queued {
    size_t entry;
    int slot;
    int64_t offset;
    int64_t size;
  };
  // Producer: room for `bytes` (<= piece_bytes_) at fill_slot_/fill_pos_,
  // moving to a free slot (waiting for one) when the current one is full.
  absl::Status MakeRoom(int64_t bytes);
  // Producer: the next `size` bytes at the fill position are entry `entry`'s.
  void Push(size_t entry, int64_t size);
  void DropHold(int slot);  // mu_ held
  std::unique_ptr<char, FreeMemory> NewSlotMemory() const;

  const int64_t piece_bytes_;
  const int max_slots_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<Slot> slots_;  // guarded by mu_ (reserved: an element never moves)
  std::vector<int> free_;    // guarded by mu_
  std::deque<Queued> queued_;  // guarded by mu_
  int reading_ = -1;           // the slot the writer holds; guarded by mu_
  absl::Status aborted_;       // guarded by mu_
  bool draining_ = false;  // the writer drains: sealed, or the producer ran out of room; guarded by mu_
  // The producer's fill position (producer thread only).
  int fill_slot_ = -1;
  int64_t fill_pos_ = 0;
  int64_t slots_filled_ = 0;  // slots this save's snapshot has begun, reused ones again
};

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_ASYNC_STAGING_H_
