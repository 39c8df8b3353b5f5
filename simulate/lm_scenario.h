// The lm scenario: the GPT language model (lm_run.h) trained on byte tokens
// of the default corpus on a 2 x 2 mesh of thread-ranks (DP x TP), a
// checkpoint halfway, then resumed from it on a 1 x 3 and a 4 x 1 mesh: the
// losses after each resume must equal the uninterrupted run's at the same
// steps (fp32: to 1e-4 relative; the TP reductions sum in another order).
// Under options.strategy fsdp or ddp (data parallel only): trained on 4
// thread-ranks, resumed on 3 and on 2; fsdp gathers one block at a time
// unless options.fsdp_per_unit is off.
#ifndef SHARDLIGHT_SIMULATE_LM_SCENARIO_H_
#define SHARDLIGHT_SIMULATE_LM_SCENARIO_H_

#include <ostream>

#include "absl/status/status.h"
#include "simulate/scenario.h"

namespace shardlight::simulate {

absl::Status RunLmScenario(const ScenarioOptions& options, std::ostream& out);

// InvalidArgument naming --strategy when options.strategy is not one of the
// LM job's (lm_run.h: kLmStrategies), naming --fsdp_per_unit when it is off
// under another strategy than fsdp.
absl::Status CheckLmScenarioStrategy(const ScenarioOptions& options);

}  // namespace shardlight::simulate

#endif  // SHARDLIGHT_SIMULATE_LM_SCENARIO_H_
