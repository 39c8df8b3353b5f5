#include "lightning/tp/mesh_sgd.h"

#include <ATen/core/grad_mode.h>

#include "sharded/mesh/mesh_checkpoint.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::tp {

absl::StatusOr<std::unique_ptr<MeshSgd>> MeshSgd::Create(MeshParams params, SgdOptions options) {
  SL_RETURN_IF_ERROR(CheckSgdOptions(options));
  std::unique_ptr<MeshSgd> sgd(new MeshSgd(std::move(params), options));
  at::NoGradGuard no_grad;
  for (const auto& [key, p] : sgd->params_) {
    sharded::mesh::MeshTensor buffer = p->EmptyLike();
    buffer.local().zero_();
    sgd->buffers_.push_back(std::move(buffer));
  }
  return sgd;
}

void MeshSgd::Step() {
  const bool first = steps() == 0;
  for (size_t i = 0; i < params_.size(); ++i) SgdUpdate(params_[i].second->local(), buffers_[i].local(), first, options_);
  step_.add_(1);
}

absl::Status MeshSgd::AddStateTo(sharded::StateDict& dict, const std::string& prefix, bool for_load) {
  for (size_t i = 0; i < params_.size(); ++i) {
    SL_ASSIGN_OR_RETURN(sharded::ShardedTensor view, for_load ? sharded::mesh::ViewForLoad(buffers_[i])
                                                              : sharded::mesh::ViewForSave(buffers_[i]));
    SL_RETURN_IF_ERROR(dict.Insert(prefix + params_[i].first + ".momentum_buffer", std::move(view)));
  }
  return dict.Insert(prefix + "step", step_);
}

absl::Status MeshSgd::CompleteLoad() {
  for (sharded::mesh::MeshTensor& buffer : buffers_) SL_RETURN_IF_ERROR(sharded::mesh::CompleteLoad(buffer));
  return absl::OkStatus();
}

}  // namespace shardlight::lightning::tp
