// Gradients of a model whose parameters are mesh members on a TpMesh (the TP
// layers of this package): the data-parallel reduction and the global
// gradient norm.
//
// Convention: each rank's loss is its DP shard's share of the global loss
// (sum over its samples / global sample count), identical on the ranks of
// one TP group; the global loss is then the sum over the DP dims.
#ifndef SHARDLIGHT_LIGHTNING_TP_MESH_GRADIENTS_H_
#define SHARDLIGHT_LIGHTNING_TP_MESH_GRADIENTS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lightning/tp/tp_mesh.h"
#include "sharded/mesh/mesh_tensor.h"

namespace shardlight::lightning::tp {

// Key and member of every trainable parameter (local piece requires_grad).
using MeshParams = std::vector<std::pair<std::string, sharded::mesh::MeshTensor*>>;

// Collective over every DP dim's sub-group: each parameter's gradient summed
// over the data-parallel ranks (one flat allreduce per DP dim). A parameter
// without a gradient gets zeros. Unavailable naming the collective on failure.
absl::Status AllreduceDataParallelGrads(const TpMesh& tp, const MeshParams& params);

// Collective over the TP group: the L2 norm of all gradients of the global
// model (TP-sharded pieces summed over the TP group, replicated ones counted
// once), the same on every rank. Call after AllreduceDataParallelGrads.
absl::StatusOr<double> GlobalGradNorm(const TpMesh& tp, const MeshParams& params);

// Collective: PyTorch's clip_grad_norm_ across the mesh -- every gradient
// scaled by min(1, max_norm / (norm + 1e-6)). Returns the norm before
// clipping. InvalidArgument for max_norm <= 0.
absl::StatusOr<double> ClipGradNorm(const TpMesh& tp, const MeshParams& params, double max_norm);

// Collective over the members' world group (the mesh world every member
// shares): the L2 norm of all gradients of the global model for members of
// any layout without Partial -- each distinct piece counted once, by the rank
// at coordinate 0 of every mesh dim that replicates it -- the same on every
// rank. For layouts that split a tensor over several mesh dims (FSDP x TP:
// lightning/strategies/fsdp_tp_strategy.h), where GlobalGradNorm's sum over
// the TP group alone would miss the other pieces. No members: 0, without a
// collective. InvalidArgument for a Partial placement (every rank has the
// same layout, so every rank returns it); Unavailable when the allreduce fails.
absl::StatusOr<double> MeshGradNorm(const MeshParams& params);

// Local: every member's gradient clamped to [-clip_value, clip_value]
// (members without a gradient are skipped).
void ClampGradValues(const MeshParams& params, double clip_value);

// Collective: ClipGradNorm with MeshGradNorm's norm.
absl::StatusOr<double> ClipMeshGradNorm(const MeshParams& params, double max_norm);

}  // namespace shardlight::lightning::tp

#endif  // SHARDLIGHT_LIGHTNING_TP_MESH_GRADIENTS_H_
