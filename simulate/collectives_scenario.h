// The "collectives" scenario: a checked health run of the simulated cluster.
#ifndef SHARDLIGHT_SIMULATE_COLLECTIVES_SCENARIO_H_
#define SHARDLIGHT_SIMULATE_COLLECTIVES_SCENARIO_H_

#include <ostream>

#include "absl/status/status.h"
#include "simulate/scenario.h"

namespace shardlight::simulate {

absl::Status RunCollectivesScenario(const ScenarioOptions& options, std::ostream& out);

}  // namespace shardlight::simulate

#endif  // SHARDLIGHT_SIMULATE_COLLECTIVES_SCENARIO_H_
