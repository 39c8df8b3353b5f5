// The "gate" scenario: the feature gate's decision for this process's real
// LibTorch build beside simulated builds (NGC-style mismatches included), and
// the runtime collective probe on the simulated cluster.
#ifndef SHARDLIGHT_SIMULATE_GATE_SCENARIO_H_
#define SHARDLIGHT_SIMULATE_GATE_SCENARIO_H_

#include <ostream>

#include "absl/status/status.h"
#include "simulate/scenario.h"

namespace shardlight::simulate {

// Fails only if the real build's probe fails or a simulated build's decision
// differs from the one it is expected to produce.
absl::Status RunGateScenario(const ScenarioOptions& options, std::ostream& out);

}  // namespace shardlight::simulate

#endif  // SHARDLIGHT_SIMULATE_GATE_SCENARIO_H_
