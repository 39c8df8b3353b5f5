// Which mesh members an fsdp_tp Fit holds chunked over the data-parallel
// ranks between steps (fsdp_tp_strategy.h): FsdpTpStrategy::Setup describes
// each such member on a permuted view of its (DP, TP) mesh, (TP, DP), placed
// [its TP placement, Shard(0)], and registers that view object here. The
// marker is the object itself, not its name: a mesh a user made, whatever it
// is called, is never a registered view, and renaming views changes nothing.
// Shared by fsdp_tp (a second Fit, WithTensorParallelPieces) and
// model_parallel (which refuses such members).
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_TP_LAYOUT_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_TP_LAYOUT_H_

#include "sharded/mesh/device_mesh.h"
#include "sharded/mesh/mesh_tensor.h"

namespace shardlight::lightning::fsdp_tp_internal {

// Records `layout` as a view fsdp_tp lays members out on. Thread-safe (the
// simulator's thread-ranks set up at once); a view is forgotten once nothing
// holds it, so a later mesh at its address is not taken for it.
void RegisterLayout(const sharded::mesh::MeshPtr& layout);

// Whether `member` is held by fsdp_tp: described on a registered view and
// chunked over its dim 1 (the data-parallel ranks).
bool HeldByFsdpTp(const sharded::mesh::MeshTensor& member);

}  // namespace shardlight::lightning::fsdp_tp_internal

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_TP_LAYOUT_H_
