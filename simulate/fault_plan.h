// Fault plans for the simulated cluster: crash rank r at step k or during the
// save of step k, delay rank r at step k, or hold rank r past the collective
// timeout. A FaultInjector is a Trainer callback (plus, for save-crash, a
// fault-injecting checkpoint storage) that carries one plan out on the rank it
// names.
//
// Text form (the cluster binary's --fault flag):
//   crash:rank=R,step=K        rank R fails right after step K
//   save-crash:rank=R,step=K   rank R fails mid-save of step K (data written, not committed)
//   delay:rank=R,step=K,ms=M   rank R sleeps M ms (at most 600000) after step K, then carries on
//   timeout:rank=R,step=K      rank R stalls past the collective timeout after step K, then
//                              fails naming itself (its peers have timed out by then)
// ParseFaultPlan returns InvalidArgument quoting a malformed plan.
#ifndef SHARDLIGHT_SIMULATE_FAULT_PLAN_H_
#define SHARDLIGHT_SIMULATE_FAULT_PLAN_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lightning/callback.h"
#include "sharded/checkpoint/storage.h"

namespace shardlight::simulate {

enum class FaultKind { kCrash, kSaveCrash, kDelay, kTimeout };

struct FaultPlan {
  FaultKind kind = FaultKind::kCrash;
  int rank = 0;
  int64_t step = 1;
  std::chrono::milliseconds delay{0};  // kDelay only

  std::string ToString() const;
};

absl::StatusOr<FaultPlan> ParseFaultPlan(absl::string_view text);

class FaultInjector : public lightning::Callback {
 public:
  // `collective_timeout` sizes the stall of a kTimeout plan.
  FaultInjector(FaultPlan plan, std::chrono::milliseconds collective_timeout);

  absl::Status OnStepEnd(const lightning::TrainState& state, int64_t step, double loss) override;
  // For TrainerOptions::save_options.storage: POSIX, except that in the save
  // after step K (the plan's, kSaveCrash) rank R's data file fails to fsync.
  // Must not outlive this injector.
  std::shared_ptr<sharded::checkpoint::Storage> SaveStorage();

 private:
  FaultPlan plan_;
  std::chrono::milliseconds collective_timeout_;
  // This rank and its last completed step: a save follows a step's end.
  std::atomic<int> rank_{-1};
  std::atomic<int64_t> last_step_{-1};
};

}  // namespace shardlight::simulate

#endif  // SHARDLIGHT_SIMULATE_FAULT_PLAN_H_
