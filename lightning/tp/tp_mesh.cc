#include "lightning/tp/tp_mesh.h"

#include <ATen/core/grad_mode.h>

#include "absl/strings/str_cat.h"
#include "sharded/sharding_spec.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::tp {

using sharded::mesh::MeshPlacement;
using sharded::mesh::MeshTensor;
using sharded::mesh::Placements;

absl::StatusOr<TpMesh> TpMesh::Of(sharded::mesh::MeshPtr mesh, int tp_dim) {
  if (mesh == nullptr) return absl::InvalidArgumentError("TpMesh needs a mesh");
  if (tp_dim < 0 || tp_dim >= mesh->ndim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor-parallel dim ", tp_dim, " is not a dim of the ", mesh->ShapeString(), " mesh"));
  }
  return TpMesh{std::move(mesh), tp_dim};
}

Placements TpMesh::PlacementsFor(int64_t tensor_dim) const {
  Placements p(mesh->ndim(), MeshPlacement::Replicate());
  if (tensor_dim >= 0) p[tp_dim] = MeshPlacement::Shard(tensor_dim);
  return p;
}

std::pair<int64_t, int64_t> TpMesh::LocalRange(int64_t size) const {
  return sharded::ChunkRanges(size, tp_size())[tp_rank()];
}

absl::StatusOr<MeshTensor> MakeParameter(const TpMesh& tp, const ParamSpec& spec) {
  sharded::mesh::MeshFactoryOptions options;
  options.dtype = at::kFloat;
  options.seed = spec.seed;
  options.init = spec.init == ParamInit::kNormal ? sharded::mesh::MeshInit::kRandn
                 : spec.init == ParamInit::kOnes ? sharded::mesh::MeshInit::kOnes
                                                 : sharded::mesh::MeshInit::kZeros;
  SL_ASSIGN_OR_RETURN(MeshTensor t, sharded::mesh::MeshFactory(tp.mesh, tp.PlacementsFor(spec.shard_dim), spec.sizes,
                                                               options));
  if (spec.init == ParamInit::kNormal) {
    at::NoGradGuard no_grad;
    t.local().mul_(spec.std);
  }
  t.local().requires_grad_(true);
  return t;
}

bool IsTpSharded(const TpMesh& tp, const MeshTensor& param) { return param.placements()[tp.tp_dim].is_shard(); }

}  // namespace shardlight::lightning::tp
