#include "lightning/strategies/fsdp_test_model.h"

#include <ATen/core/grad_mode.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "lightning/strategies/fsdp_unit.h"
#include "sharded/global_random.h"
#include "sharded/sharding_spec.h"

namespace shardlight::lightning::testing {

Mlp::Mlp(MlpOptions options) : LightningModule("Mlp"), options_(options) {
  blocks_ = register_module(
      "blocks", torch::nn::ModuleList(torch::nn::Linear(6, options_.hidden), torch::nn::Linear(options_.hidden, 3)));
  head_ = register_module("head", torch::nn::Linear(3, 1));
  if (options_.tie) head_->register_parameter("tied", blocks_[1]->as<torch::nn::Linear>()->weight);
  if (options_.dtype != at::kFloat) to(options_.dtype);
}

absl::Status Mlp::ConfigureShardedModel(const ShardedContext& ctx) {
  at::NoGradGuard no_grad;
  uint64_t stream = ctx.seed * 1000 + 1;
  for (auto& p : parameters()) {
    at::Tensor values = at::empty(p.sizes(), p.options().requires_grad(false));
    const std::vector<int64_t> origin(p.dim(), 0);
    sharded::FillGlobalRandom(values, origin, p.sizes().vec(), stream++, sharded::RandomKind::kUniform);
    p.copy_(values.mul_(2.0 / std::sqrt(static_cast<double>(p.size(-1)))).sub_(1.0 / std::sqrt(p.size(-1))));
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> Mlp::TrainingStep(const Batch& batch, const StepContext& ctx) {
  const bool fail = ctx.rank == options_.fail_rank && ctx.step == options_.fail_step;
  if (fail && !options_.fail_after_first_unit) {
    return absl::DataLossError(absl::StrCat("bad batch on rank ", ctx.rank));
  }
  if (ctx.rank == options_.skip_units_rank) return at::zeros({}, options_.dtype);
  const auto [first, rows] = sharded::ChunkRanges(batch[0].size(0), ctx.world_size)[ctx.rank];
  // A rank without rows still runs every unit (on no rows): per-unit fsdp gathers in each.
  at::Tensor x = batch[0].narrow(0, first, rows);
  // Each unit casts its input to its parameters' dtype (fsdp's param_dtype:
  // FSDP2's cast_forward_inputs, which has no forward hook to live in here);
  // a no-op without a policy.
  auto unit = [](torch::nn::Module& block, const at::Tensor& input) {
    auto* linear = block.as<torch::nn::Linear>();
    return at::tanh(linear->forward(input.to(linear->weight.scalar_type())));
  };
  at::Tensor h = RunFsdpUnit(*blocks_[0], [&] { return unit(*blocks_[0], x); });
  if (fail) return absl::DataLossError(absl::StrCat("bad batch on rank ", ctx.rank, " after blocks.0"));
  h = RunFsdpUnit(*blocks_[1], [&] { return unit(*blocks_[1], h); });
  at::Tensor predicted = head_->forward(h).reshape({-1});
  return (predicted - batch[1].narrow(0, first, rows)).pow(2).sum() / batch[0].size(0);
}

absl::StatusOr<ValidationLog> Mlp::ValidationStep(const Batch& batch, const StepContext& ctx) {
  StepContext unfailing = ctx;
  unfailing.step = -2;  // fail_step never matches
  auto loss = TrainingStep(batch, unfailing);
  if (!loss.ok()) return loss.status();
  return ValidationLog{{"val_loss", *loss}};
}

absl::StatusOr<std::unique_ptr<Optimizer>> Mlp::ConfigureOptimizers() {
  auto sgd = Sgd::Create(TrainablesOf(*this), SgdOptions{options_.lr, options_.momentum, options_.weight_decay});
  if (!sgd.ok()) return sgd.status();
  return std::unique_ptr<Optimizer>(*std::move(sgd));
}

Batch MlpData::GetBatch(int64_t step) const {
  at::Tensor x = at::empty({batch_size_, 6}, at::kFloat);
  sharded::FillGlobalRandom(x, {0, 0}, {batch_size_, 6}, seed_ * 7919 + static_cast<uint64_t>(step),
                            sharded::RandomKind::kNormal);
  x = x.to(dtype_);
  at::Tensor y = at::sin(x.sum(1)) + 0.1 * x.select(1, 0);
  return {x, y};
}

}  // namespace shardlight::lightning::testing
