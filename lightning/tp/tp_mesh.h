// TpMesh: a DeviceMesh seen by the tensor-parallel layers -- one mesh dim is
// tensor parallel (TP: weights split over it, activations reduced over its
// sub-group), every other dim is data parallel (DP: weights replicated,
// gradients summed over it).
//
// Layer parameters are mesh members of the layer's ShardedModule, placed
// Shard(d) on the TP dim (or Replicate) and Replicate on every DP dim, their
// local pieces leaf tensors with requires_grad. Values are a function of the
// seed and the global element index (sharded/global_random.h), so a layer
// holds the same global weights on any mesh.
#ifndef SHARDLIGHT_LIGHTNING_TP_TP_MESH_H_
#define SHARDLIGHT_LIGHTNING_TP_TP_MESH_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "sharded/mesh/device_mesh.h"
#include "sharded/mesh/mesh_tensor.h"

namespace shardlight::lightning::tp {

struct TpMesh {
  sharded::mesh::MeshPtr mesh;
  int tp_dim = 0;

  // InvalidArgument when tp_dim is not a dim of the mesh.
  static absl::StatusOr<TpMesh> Of(sharded::mesh::MeshPtr mesh, int tp_dim);

  int64_t tp_size() const { return mesh->size(tp_dim); }
  int64_t tp_rank() const { return mesh->coords()[tp_dim]; }
  c10d::ProcessGroup& tp_group() const { return *mesh->group(tp_dim); }
  // Shard(tensor_dim) on the TP dim, Replicate elsewhere; tensor_dim < 0:
  // Replicate everywhere.
  sharded::mesh::Placements PlacementsFor(int64_t tensor_dim) const;
  // [start, start + length) of `size` (torch.chunk) held by this TP rank.
  std::pair<int64_t, int64_t> LocalRange(int64_t size) const;
};

enum class ParamInit { kNormal, kZeros, kOnes };

struct ParamSpec {
  std::vector<int64_t> sizes;
  int64_t shard_dim = -1;  // the tensor dim split over TP; -1: replicated
  ParamInit init = ParamInit::kNormal;
  double std = 0.02;       // kNormal: N(0, std^2) by global index
  uint64_t seed = 0;
};

// Collective over the mesh's world: a trainable parameter (float32, local
// piece requires_grad) laid out by spec on `tp`.
absl::StatusOr<sharded::mesh::MeshTensor> MakeParameter(const TpMesh& tp, const ParamSpec& spec);

// Whether a parameter is split over the TP dim (otherwise every TP rank holds
// all of it).
bool IsTpSharded(const TpMesh& tp, const sharded::mesh::MeshTensor& param);

}  // namespace shardlight::lightning::tp

#endif  // SHARDLIGHT_LIGHTNING_TP_TP_MESH_H_
