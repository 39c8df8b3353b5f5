#include "lightning/strategies/tp_test_model.h"

#include <ATen/core/grad_mode.h>

#include "lightning/sharded_module.h"
#include "lightning/tp/mesh_optimizer.h"
#include "sharded/sharding_spec.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::tp_testing {

TinyTp::TinyTp(int fail_dp, int64_t fail_step, bool dense, c10::ScalarType dtype, bool sgd)
    : LightningModule("TinyTp"), fail_dp_(fail_dp), fail_step_(fail_step), dtype_(dtype), sgd_(sgd) {
  if (dense) register_parameter("scale", at::ones({kOut}));
}

absl::Status TinyTp::ConfigureShardedModel(const ShardedContext& ctx) {
  if (ctx.mesh == nullptr) return absl::OkStatus();  // the strategy's Setup says why
  SL_ASSIGN_OR_RETURN(tp_, tp::TpMesh::Of(ctx.mesh, 1));
  SL_ASSIGN_OR_RETURN(fc_, tp::ColumnParallelLinear::Create(tp_, {kIn, kHidden, true, 0.5, ctx.seed}));
  SL_ASSIGN_OR_RETURN(proj_, tp::RowParallelLinear::Create(tp_, {kHidden, kOut, true, 0.5, ctx.seed + 1}));
  register_module("fc", fc_);
  register_module("proj", proj_);
  if (dtype_ != at::kFloat) {
    at::NoGradGuard no_grad;
    for (auto& [key, m] : MeshMembers(*this, "")) m->local().set_data(m->local().to(dtype_));
  }
  return absl::OkStatus();
}

at::Tensor TinyTp::Predict(const at::Tensor& x) const {
  const auto [first, count] = sharded::ChunkRanges(x.size(0), tp_.mesh->size(0))[tp_.mesh->coords()[0]];
  return proj_->Forward(at::gelu(fc_->Forward(x.narrow(0, first, count).to(dtype_))));
}

absl::StatusOr<at::Tensor> TinyTp::TrainingStep(const Batch& batch, const StepContext& ctx) {
  if (tp_.mesh->coords()[0] == fail_dp_ && ctx.step == fail_step_) return absl::DataLossError("batch unreadable");
  const auto [first, count] = sharded::ChunkRanges(kBatch, tp_.mesh->size(0))[tp_.mesh->coords()[0]];
  const at::Tensor y = batch[1].narrow(0, first, count).to(dtype_);
  return (Predict(batch[0]) - y).pow(2).sum() / static_cast<double>(kBatch);
}

absl::StatusOr<ValidationLog> TinyTp::ValidationStep(const Batch& batch, const StepContext& ctx) {
  const auto [first, count] = sharded::ChunkRanges(kBatch, tp_.mesh->size(0))[tp_.mesh->coords()[0]];
  const at::Tensor y = batch[1].narrow(0, first, count).to(dtype_);
  return ValidationLog{{"val_loss", (Predict(batch[0]) - y).pow(2).sum() / static_cast<double>(kBatch)}};
}

absl::StatusOr<std::unique_ptr<Optimizer>> TinyTp::ConfigureOptimizers() {
  if (sgd_) {
    SL_ASSIGN_OR_RETURN(auto sgd, tp::MeshSgdOptimizer::Create(tp::TrainableMeshMembers(*this), {0.05, 0.9, 0.01}));
    return std::unique_ptr<Optimizer>(std::move(sgd));
  }
  SL_ASSIGN_OR_RETURN(auto adam,
                      tp::MeshAdamWOptimizer::Create(tp::TrainableMeshMembers(*this), {0.05, 0.9, 0.99, 1e-8, 0.01}));
  return std::unique_ptr<Optimizer>(std::move(adam));
}

at::Tensor TinyTp::fc_grad() const { return fc_->weight().local().grad(); }

Batch TinyData::GetBatch(int64_t step) const {
  const at::Tensor i = at::arange(kBatch * kIn, at::kFloat).view({kBatch, kIn});
  const at::Tensor x = at::sin(i * 0.7 + static_cast<double>(step));
  const at::Tensor y = at::cos(x.narrow(1, 0, kOut) * 2.0);
  return {x, y};
}

sharded::mesh::MeshContext MeshContextOf(const simulate::RankContext& ctx) {
  sharded::mesh::MeshContext m;
  m.store = ctx.store;
  m.rank = ctx.rank;
  m.world_size = ctx.world_size;
  m.world = ctx.pg;
  return m;
}

}  // namespace shardlight::lightning::tp_testing
