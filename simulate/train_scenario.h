// The "train" scenario (the default main job) and the "faults" scenario.
//
// train: an EmbeddingMlp (sharded embedding table + dense MLP) trains on N
// thread-ranks, checkpoints halfway, is reloaded on another world size, is
// checked equal to what was saved, and trains to the end. --fault injects one
// fault plan into the first phase.
// faults: every kind of fault in turn, each ending in a clear error naming the
// rank within bounded time, the last committed checkpoint intact, and a resume
// that completes.
#ifndef SHARDLIGHT_SIMULATE_TRAIN_SCENARIO_H_
#define SHARDLIGHT_SIMULATE_TRAIN_SCENARIO_H_

#include <ostream>

#include "absl/status/status.h"
#include "simulate/scenario.h"

namespace shardlight::simulate {

absl::Status RunTrainScenario(const ScenarioOptions& options, std::ostream& out);
// The train scenario's options: a fault plan must parse, name a rank of the
// world and a step of phase 1 (steps 1..max(1, steps / 2)), or it could never
// happen; InvalidArgument saying which.
absl::Status CheckTrainScenario(const ScenarioOptions& options);
absl::Status RunFaultsScenario(const ScenarioOptions& options, std::ostream& out);

}  // namespace shardlight::simulate

#endif  // SHARDLIGHT_SIMULATE_TRAIN_SCENARIO_H_
