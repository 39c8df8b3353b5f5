// FaultInjector carries one fault plan (simulate/core/fault_plan.h) out
// inside a Trainer run: a callback that crashes, delays or stalls the plan's
// rank after the plan's step, plus, for save-crash (save-delay), a checkpoint
// storage that fails (delays) that rank's data-file fsync in the save of that
// step. A background save (async_checkpoint) may write while training is
// steps further: a save is known by its step directory in a checkpoint root,
// and in a plain checkpoint directory by its place in the Trainer's schedule
// (saves are one at a time, one data file per rank each: the n-th data-file
// fsync of this rank's Fit is the n-th save's).
#ifndef SHARDLIGHT_SIMULATE_FAULT_INJECTOR_H_
#define SHARDLIGHT_SIMULATE_FAULT_INJECTOR_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include "lightning/callback.h"
#include "sharded/checkpoint/storage/storage.h"
#include "simulate/core/fault_plan.h"

namespace shardlight::simulate {

class FaultInjector : public lightning::Callback {
 public:
  // `collective_timeout` sizes the stall of a kTimeout plan;
  // `checkpoint_every` is the Trainer's (lightning::CheckpointsAfterStep).
  FaultInjector(FaultPlan plan, std::chrono::milliseconds collective_timeout, int64_t checkpoint_every);

  absl::Status OnTrainStart(const lightning::TrainState& state) override;
  absl::Status OnStepEnd(const lightning::TrainState& state, int64_t step, double loss) override;
  // For TrainerOptions::save_options.storage: POSIX, except that in the save
  // of step K (the plan's: in step-<K>/ of a root, else the save after step
  // K) rank R's data file fails to fsync (kSaveCrash) or fsyncs M ms late
  // (kSaveDelay), once.
  // Must not outlive this injector.
  std::shared_ptr<sharded::checkpoint::Storage> SaveStorage();

 private:
  FaultPlan plan_;
  std::chrono::milliseconds collective_timeout_;
  const int64_t checkpoint_every_;
  std::atomic<int> rank_{-1};
  std::atomic<int64_t> max_steps_{0};
  // The step of the last save whose data file this rank fsynced (the
  // start step before the first).
  std::atomic<int64_t> last_save_step_{0};
  std::atomic<bool> fired_{false};  // the save fault happens once
};

}  // namespace shardlight::simulate

#endif  // SHARDLIGHT_SIMULATE_FAULT_INJECTOR_H_
