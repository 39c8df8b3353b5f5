// AsyncCheckpointer: checkpoints written in the background while training
// goes on.
//
// Save(state_dict, step) takes a snapshot of this rank's bytes of
// `state_dict` -- the values at this step: in-place updates after Save
// returns never reach the checkpoint -- into a staging area (staging.h) and
// returns a handle. The save itself is checkpoint.h's protocol (one data file
// per rank with block checksums, agreement, rank 0's atomic index commit;
// with keep_last > 0 a checkpoint root's step-<N>/ directory, `latest` and
// retention, checkpoint_root.h), run by save_protocol.h's RunSave on a
// background thread over the checkpointer's own process group, from the
// staged bytes.
//
// Its own group: the background save never talks on the group training uses,
// so a save in flight cannot deadlock against a training collective (a
// barrier, an allreduce) on another thread. Make it from the same store as
// the training group under its own prefix: RankContext::groups or
// DistributedContext::groups() -> GroupFactory::Make("async_checkpoint").
//
// Bounded memory: staging holds at most staging_budget_bytes of host memory
// per rank (slots kept for the next save). Staging memory is made resident
// in the background -- by Reserve before the first save, and after each save
// for the next one of the same size -- so that Save costs training only a
// copy into resident memory. When
// this rank's part of the state is larger, Save blocks until the part that
// does not fit has been written; a slot is reused only after the write that
// reads it has finished.
//
// One save in flight per checkpointer (per location): Save first waits for
// the previous save to end.
//
// Failure: a save that fails on any rank (bad input, a storage error, an
// exception, a peer that died) fails on every rank with the agreed error that
// names the failing rank first ("... failed on rank R: ..."), reported once:
// by Wait (the handle's or the checkpointer's) or, when nobody waited, by the
// next Save, which then starts nothing. Until a save's commit the previous
// checkpoint is the committed one; a process killed with a save in flight
// leaves it loadable. Every wait is bounded by the group's collective timeout.
//
// Thread use: Save, Wait and the destructor are called from one thread (the
// training loop); the handle's Done may be polled from any. Every rank calls
// Create, Save and Wait in the same order (they are collective).
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_ASYNC_ASYNC_CHECKPOINTER_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_ASYNC_ASYNC_CHECKPOINTER_H_

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/async/staging.h"
#include "sharded/state_dict.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::sharded::checkpoint {

struct AsyncCheckpointOptions {
  // Host memory for the snapshot, per rank; at least
  // StagingArea::kMinBudgetBytes (64 KiB).
  int64_t staging_budget_bytes = int64_t{256} << 20;
  // > 0: the location is a checkpoint root keeping this many steps
  // (checkpoint_root.h); 0: one plain checkpoint there, replaced by each save.
  int keep_last = 0;
  // For the checkpoint itself (checksum blocks, storage, ...).
  SaveOptions save;
};

// One background save.
class AsyncSaveHandle {
 public:
  AsyncSaveHandle(int64_t step, std::string dir) : step_(step), dir_(std::move(dir)) {}
  int64_t step() const { return step_; }
  // The checkpoint directory written (the step's directory in a root).
  const std::string& dir() const { return dir_; }
  // Local: whether the save has ended on this rank (Wait would not block).
  bool Done() const;
  // Collective outcome, local wait: the save's agreed status, the same on
  // every rank. Marks the outcome reported.
  absl::Status Wait();
  // This rank's data file, once Done and OK.
  int64_t bytes_written() const;

 private:
  friend class AsyncCheckpointer;
  void Finish(absl::Status status, int64_t bytes_written);
  bool reported() const;

  const int64_t step_;
  const std::string dir_;
  mutable std::mutex mu_;
  std::condition_variable finished_;
  bool done_ = false;       // guarded by mu_
  bool reported_ = false;   // guarded by mu_
  absl::Status status_;     // guarded by mu_
  int64_t bytes_written_ = 0;  // guarded by mu_
};

class AsyncCheckpointer {
 public:
  // Collective over `group`: ranks agree on the location and keep_last.
  // InvalidArgument (on every rank, naming the rank) for a null group, an
  // empty location, a negative keep_last or a budget below the minimum.
  static absl::StatusOr<std::unique_ptr<AsyncCheckpointer>> Create(std::string location,
                                                                   c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                                   AsyncCheckpointOptions options = {});
  // Waits for the save in flight (its outcome is dropped: Wait first to see it).
  ~AsyncCheckpointer();
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  // Collective: waits for the previous save (returning its failure if not yet
  // reported; nothing new starts then), snapshots `state_dict` (step >= 0,
  // the same on every rank) and returns once every byte is staged or
  // written; the rest runs in the background. This rank's bad input (a bad
  // key, an undefined tensor) fails the save, on every rank, at Wait.
  absl::StatusOr<std::shared_ptr<AsyncSaveHandle>> Save(const StateDict& state_dict, int64_t step);
  // Local, returns at once: makes staging memory for a state like
  // `state_dict` (this rank's bytes, up to the budget) resident on a
  // background thread, so that even the first Save copies into resident
  // memory. Optional: a save that finds the memory missing allocates it.
  void Reserve(const StateDict& state_dict);
  // The last save's outcome (OK when there was none); see AsyncSaveHandle::Wait.
  absl::Status Wait();
  // The directory a save of `step` writes.
  std::string DirForStep(int64_t step) const;
  // Host memory the staging area holds now (at most the budget).
  int64_t staging_bytes() const { return staging_.allocated_bytes(); }

 private:
  AsyncCheckpointer(std::string location, c10::intrusive_ptr<c10d::ProcessGroup> group,
                    AsyncCheckpointOptions options);
  // The background half of one save.
  struct WriteJob;
  void Write(AsyncSaveHandle& handle, const WriteJob& job);
  void JoinWriter();
  void JoinReserver();

  const std::string location_;
  const c10::intrusive_ptr<c10d::ProcessGroup> group_;
  const AsyncCheckpointOptions options_;
  StagingArea staging_;
  std::shared_ptr<AsyncSaveHandle> current_;
  std::thread writer_;
  std::thread reserver_;  // Reserve's
};

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_ASYNC_ASYNC_CHECKPOINTER_H_
