// Fault plans: crash rank r at step k or during the save of step k, delay
// rank r at step k, or hold rank r past the collective timeout. This is the
// plan as data (parsed from text, printed back); simulate/fault_injector.h
// carries a plan out inside a Trainer run. The floor: no lightning/ here.
//
// Text form (the cluster binary's --fault flag):
//   crash:rank=R,step=K        rank R fails right after step K
//   save-crash:rank=R,step=K   rank R fails mid-save of step K (data written, not committed)
//   delay:rank=R,step=K,ms=M   rank R sleeps M ms (at most 600000) after step K, then carries on
//   save-delay:rank=R,step=K,ms=M  rank R's data file of the save of step K takes M ms longer to
//                              become durable (a background save stays in flight meanwhile)
//   timeout:rank=R,step=K      rank R stalls past the collective timeout after step K, then
//                              fails naming itself (its peers have timed out by then)
// ParseFaultPlan returns InvalidArgument quoting a malformed plan.
#ifndef SHARDLIGHT_SIMULATE_CORE_FAULT_PLAN_H_
#define SHARDLIGHT_SIMULATE_CORE_FAULT_PLAN_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardlight::simulate {

enum class FaultKind { kCrash, kSaveCrash, kDelay, kTimeout, kSaveDelay };

struct FaultPlan {
  FaultKind kind = FaultKind::kCrash;
  int rank = 0;
  int64_t step = 1;
  std::chrono::milliseconds delay{0};  // kDelay and kSaveDelay only

  std::string ToString() const;
};

absl::StatusOr<FaultPlan> ParseFaultPlan(absl::string_view text);

}  // namespace shardlight::simulate

#endif  // SHARDLIGHT_SIMULATE_CORE_FAULT_PLAN_H_
