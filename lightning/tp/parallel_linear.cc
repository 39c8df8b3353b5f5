#include "lightning/tp/parallel_linear.h"

#include "absl/strings/str_cat.h"
#include "lightning/tp/tp_collectives.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::tp {
namespace {

absl::Status CheckSizes(const char* layer, const LinearOptions& o) {
  if (o.in < 1 || o.out < 1) {
    return absl::InvalidArgumentError(absl::StrCat(layer, ": in and out features must be >= 1, not ", o.in, " and ", o.out));
  }
  return absl::OkStatus();
}

at::Tensor BiasOf(ShardedModule& m) {
  sharded::mesh::MeshTensor* b = m.mesh_tensor("bias");
  return b == nullptr ? at::Tensor() : b->local();
}

}  // namespace

absl::StatusOr<std::shared_ptr<ColumnParallelLinear>> ColumnParallelLinear::Create(const TpMesh& tp,
                                                                                   const LinearOptions& o) {
  SL_RETURN_IF_ERROR(CheckSizes("ColumnParallelLinear", o));
  std::shared_ptr<ColumnParallelLinear> layer(new ColumnParallelLinear(tp));
  SL_ASSIGN_OR_RETURN(sharded::mesh::MeshTensor w,
                      MakeParameter(tp, {{o.out, o.in}, 0, ParamInit::kNormal, o.init_std, o.seed}));
  layer->local_out_ = w.local().size(0);
  SL_RETURN_IF_ERROR(layer->RegisterMeshTensor("weight", std::move(w)));
  if (o.bias) {
    SL_ASSIGN_OR_RETURN(sharded::mesh::MeshTensor b, MakeParameter(tp, {{o.out}, 0, ParamInit::kZeros}));
    SL_RETURN_IF_ERROR(layer->RegisterMeshTensor("bias", std::move(b)));
  }
  return layer;
}

at::Tensor ColumnParallelLinear::Forward(const at::Tensor& x) {
  return at::linear(CopyToTp(x, tp_.tp_group()), weight().local(), BiasOf(*this));
}

absl::StatusOr<std::shared_ptr<RowParallelLinear>> RowParallelLinear::Create(const TpMesh& tp,
                                                                             const LinearOptions& o) {
  SL_RETURN_IF_ERROR(CheckSizes("RowParallelLinear", o));
  std::shared_ptr<RowParallelLinear> layer(new RowParallelLinear(tp));
  SL_ASSIGN_OR_RETURN(sharded::mesh::MeshTensor w,
                      MakeParameter(tp, {{o.out, o.in}, 1, ParamInit::kNormal, o.init_std, o.seed}));
  layer->local_in_ = w.local().size(1);
  SL_RETURN_IF_ERROR(layer->RegisterMeshTensor("weight", std::move(w)));
  if (o.bias) {
    SL_ASSIGN_OR_RETURN(sharded::mesh::MeshTensor b, MakeParameter(tp, {{o.out}, -1, ParamInit::kZeros}));
    SL_RETURN_IF_ERROR(layer->RegisterMeshTensor("bias", std::move(b)));
  }
  return layer;
}

at::Tensor RowParallelLinear::Forward(const at::Tensor& x) {
  at::Tensor y = ReduceFromTp(at::matmul(x, weight().local().t()), tp_.tp_group());
  const at::Tensor b = BiasOf(*this);
  return b.defined() ? y + b : y;
}

}  // namespace shardlight::lightning::tp
