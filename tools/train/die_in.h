// --die_in of //tools/train: a fault that kills this process (SIGKILL, no
// unwinding, no message to its peers) as it enters one per-unit FSDP
// collective, so that real-process tests lose a rank exactly inside a unit's
// all-gather or reduce-scatter (FsdpOptions::on_unit_collective). Under
// fsdp_tp the one unit is the whole model, "model" (FsdpTpStrategy::kUnit):
// its DP all-gather and reduce-scatter of each step.
//
// Text form:
//   all-gather:rank=R,step=K,unit=U[,n=N]      the N-th (default 1) all-gather
//                                              of unit U in step K: 1 the
//                                              forward's, 2 the backward's
//   reduce-scatter:rank=R,step=K,unit=U        unit U's reduce-scatter in step K
// K counts from 0, as the Trainer's errors name steps ("... at step K
// failed"): step K is the one logged as "lm: step K+1". ParseDieIn returns
// InvalidArgument quoting a malformed text.
#ifndef SHARDLIGHT_TOOLS_TRAIN_DIE_IN_H_
#define SHARDLIGHT_TOOLS_TRAIN_DIE_IN_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardlight::tools {

struct DieIn {
  std::string collective;  // "all-gather" or "reduce-scatter"
  int rank = 0;
  int64_t step = 0;
  std::string unit;
  int n = 1;
};

absl::StatusOr<DieIn> ParseDieIn(absl::string_view text);

// The hook for LmJobOptions::fsdp_on_unit_collective on rank `rank`: on the
// collective `die` names it writes "train: rank R: --die_in: killed in the
// <collective> of unit U at step K" to stderr and raises SIGKILL; it does
// nothing on another rank.
std::function<void(const std::string& collective, const std::string& unit, int64_t step)> DieInHook(const DieIn& die,
                                                                                                     int rank);

}  // namespace shardlight::tools

#endif  // SHARDLIGHT_TOOLS_TRAIN_DIE_IN_H_
