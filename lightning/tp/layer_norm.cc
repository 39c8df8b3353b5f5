#include "lightning/tp/layer_norm.h"

#include "absl/strings/str_cat.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::tp {

absl::StatusOr<std::shared_ptr<ReplicatedLayerNorm>> ReplicatedLayerNorm::Create(const TpMesh& tp, int64_t dim,
                                                                                 double eps) {
  if (dim < 1) return absl::InvalidArgumentError(absl::StrCat("ReplicatedLayerNorm: dim must be >= 1, not ", dim));
  std::shared_ptr<ReplicatedLayerNorm> layer(new ReplicatedLayerNorm(dim, eps));
  SL_ASSIGN_OR_RETURN(sharded::mesh::MeshTensor w, MakeParameter(tp, {{dim}, -1, ParamInit::kOnes}));
  SL_ASSIGN_OR_RETURN(sharded::mesh::MeshTensor b, MakeParameter(tp, {{dim}, -1, ParamInit::kZeros}));
  SL_RETURN_IF_ERROR(layer->RegisterMeshTensor("weight", std::move(w)));
  SL_RETURN_IF_ERROR(layer->RegisterMeshTensor("bias", std::move(b)));
  return layer;
}

at::Tensor ReplicatedLayerNorm::Forward(const at::Tensor& x) {
  return at::layer_norm(x, {dim_}, mesh_tensor("weight")->local(), mesh_tensor("bias")->local(), eps_);
}

}  // namespace shardlight::lightning::tp
