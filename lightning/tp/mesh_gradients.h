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

}  // namespace shardlight::lightning::tp

#endif  // SHARDLIGHT_LIGHTNING_TP_MESH_GRADIENTS_H_
