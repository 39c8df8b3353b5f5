// The mesh scenario: a tensor-parallel pair of linear layers (column- then
// row-parallel, the Partial output reduced over the TP sub-group) trained
// data- and tensor-parallel on a 2 x 2 mesh of thread-ranks, checked step by
// step against the same training done densely; then checkpointed through the
// module's state dict (the weights are its mesh members) and reloaded on a
// 1 x 3 mesh, where the loaded weights must equal the saved ones. The job
// itself is simulate/mesh_run.h, shared with //tools/train --job=mesh.
#ifndef SHARDLIGHT_SIMULATE_MESH_SCENARIO_H_
#define SHARDLIGHT_SIMULATE_MESH_SCENARIO_H_

#include <ostream>

#include "absl/status/status.h"
#include "simulate/scenario.h"

namespace shardlight::simulate {

absl::Status RunMeshScenario(const ScenarioOptions& options, std::ostream& out);

}  // namespace shardlight::simulate

#endif  // SHARDLIGHT_SIMULATE_MESH_SCENARIO_H_
