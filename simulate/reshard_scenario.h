// The "reshard" and "roundtrip" scenarios.
//
// reshard: a randomly initialised ShardedTensor moves through several layouts
// (chunk dim 0 -> chunk dim 1 -> an uneven grid with several shards per rank
// -> chunk dim 0); every layout's global tensor is checked against the first,
// and each rank's bytes sent are printed beside the minimum (the elements
// whose owner changed).
// roundtrip: an EmbeddingMlp's state dict goes through a checkpoint into a
// fresh module built from another seed; the loaded model must equal the saved.
#ifndef SHARDLIGHT_SIMULATE_RESHARD_SCENARIO_H_
#define SHARDLIGHT_SIMULATE_RESHARD_SCENARIO_H_

#include <ostream>

#include "absl/status/status.h"
#include "simulate/scenario.h"

namespace shardlight::simulate {

absl::Status RunReshardScenario(const ScenarioOptions& options, std::ostream& out);
absl::Status RunRoundtripScenario(const ScenarioOptions& options, std::ostream& out);

}  // namespace shardlight::simulate

#endif  // SHARDLIGHT_SIMULATE_RESHARD_SCENARIO_H_
