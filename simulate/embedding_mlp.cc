#include "simulate/embedding_mlp.h"

#include <ATen/core/grad_mode.h>

#include <cmath>

#include "sharded/factories.h"
#include "sharded/global_random.h"
#include "sharded/status_macros.h"

namespace shardlight::simulate {
namespace {

// Overwrites a dense parameter with U(-bound, bound) values from `seed`.
void FillFromSeed(at::Tensor& param, uint64_t seed, double bound) {
  at::NoGradGuard no_grad;
  at::Tensor values = at::empty(param.sizes(), param.options().requires_grad(false));
  const std::vector<int64_t> origin(param.dim(), 0);
  sharded::FillGlobalRandom(values, origin, param.sizes().vec(), seed, sharded::RandomKind::kUniform);
  param.copy_(values.mul_(2 * bound).sub_(bound));
}

}  // namespace

EmbeddingMlp::EmbeddingMlp(EmbeddingMlpOptions options, const lightning::FeatureDecision& gate)
    : LightningModule("EmbeddingMlp", gate), options_(options) {
  fc1_ = register_module("fc1", torch::nn::Linear(options_.dim, options_.hidden));
  fc2_ = register_module("fc2", torch::nn::Linear(options_.hidden, 1));
}

absl::Status EmbeddingMlp::ConfigureShardedModel(const lightning::ShardedContext& ctx) {
  sharded::ShardedOptions trainable;
  trainable.requires_grad = true;
  SL_ASSIGN_OR_RETURN(sharded::ShardedTensor table,
                      sharded::Randn(sharded::ChunkShardingSpec::OnRanks(0, ctx.world_size),
                                     {options_.vocab, options_.dim}, ctx.seed, trainable, ctx.pg));
  SL_RETURN_IF_ERROR(RegisterShardedTensor("table", std::move(table)));
  uint64_t stream = ctx.seed * 1000 + 1;
  for (auto& p : parameters()) FillFromSeed(p, stream++, 1.0 / std::sqrt(static_cast<double>(p.size(-1))));
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> EmbeddingMlp::TrainingStep(const lightning::Batch& batch,
                                                      const lightning::StepContext& ctx) {
  if (batch.size() != 2) return absl::InvalidArgumentError("EmbeddingMlp wants a batch of (rows, targets)");
  const at::Tensor& rows = batch[0];
  const at::Tensor& targets = batch[1];
  at::Tensor loss = at::zeros({}, at::kFloat);
  for (const auto& shard : table()->local_shards()) {
    const int64_t lo = shard.metadata.offsets[0], hi = lo + shard.metadata.sizes[0];
    at::Tensor mine = ((rows >= lo) & (rows < hi)).nonzero().reshape({-1});
    if (mine.numel() == 0) continue;
    at::Tensor embedded = shard.tensor.index_select(0, rows.index_select(0, mine) - lo);
    at::Tensor predicted = fc2_->forward(at::tanh(fc1_->forward(embedded))).reshape({-1});
    loss = loss + (predicted - targets.index_select(0, mine)).pow(2).sum() / rows.size(0);
  }
  return loss;
}

absl::StatusOr<std::unique_ptr<lightning::Optimizer>> EmbeddingMlp::ConfigureOptimizers() {
  auto sgd = lightning::Sgd::Create(lightning::TrainablesOf(*this),
                                    lightning::SgdOptions{options_.lr, options_.momentum, 0.0});
  if (!sgd.ok()) return sgd.status();
  return std::unique_ptr<lightning::Optimizer>(*std::move(sgd));
}

SyntheticRegression::SyntheticRegression(int64_t vocab, int64_t batch_size, uint64_t seed, int64_t steps_per_epoch)
    : vocab_(vocab), batch_size_(batch_size), seed_(seed), steps_per_epoch_(steps_per_epoch) {}

lightning::Batch SyntheticRegression::GetBatch(int64_t step) const {
  at::Tensor rows = at::empty({batch_size_}, at::kLong);
  at::Tensor targets = at::empty({batch_size_}, at::kFloat);
  for (int64_t i = 0; i < batch_size_; ++i) {
    const double u = sharded::GlobalRandomValue(seed_ ^ 0x7261696eULL, static_cast<uint64_t>(step * batch_size_ + i),
                                                sharded::RandomKind::kUniform);
    const int64_t row = std::min(vocab_ - 1, static_cast<int64_t>(u * static_cast<double>(vocab_)));
    rows[i] = row;
    targets[i] = static_cast<float>(std::sin(0.2 * static_cast<double>(row)) + 0.1 * std::cos(0.05 * row * row));
  }
  return {rows, targets};
}

}  // namespace shardlight::simulate
