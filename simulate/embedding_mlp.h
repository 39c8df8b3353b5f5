// EmbeddingMlp: the model the cluster's "train" scenario and the Trainer
// tests fit -- a sharded embedding table (rows chunked over the ranks) feeding
// a dense MLP, regressing a smooth function of the row index.
//
// Every value is a function of the seed (the table by global index, the dense
// layers by their own seeds), never of torch's global generator, so every rank
// builds the same dense weights and a run is reproducible at any world size.
// A batch is (row indices [B] int64, targets [B] float32); each rank scores
// the pairs whose row it owns and returns sum(squared error) / B over them,
// so the per-rank losses add up to the batch's mean squared error.
#ifndef SHARDLIGHT_SIMULATE_EMBEDDING_MLP_H_
#define SHARDLIGHT_SIMULATE_EMBEDDING_MLP_H_

#include <torch/nn/modules/linear.h>

#include <cstdint>

#include "lightning/lightning_module.h"
#include "lightning/trainer.h"
#include "sharded/sharding_spec.h"

namespace shardlight::simulate {

struct EmbeddingMlpOptions {
  int64_t vocab = 96;
  int64_t dim = 8;
  int64_t hidden = 16;
  double lr = 0.05;
  double momentum = 0.9;
};

class EmbeddingMlp : public lightning::LightningModule {
 public:
  explicit EmbeddingMlp(EmbeddingMlpOptions options = {},
                        const lightning::FeatureDecision& gate = lightning::ShardedFeature());

  absl::Status ConfigureShardedModel(const lightning::ShardedContext& ctx) override;
  absl::StatusOr<at::Tensor> TrainingStep(const lightning::Batch& batch, const lightning::StepContext& ctx) override;
  absl::StatusOr<std::unique_ptr<lightning::Optimizer>> ConfigureOptimizers() override;

  sharded::ShardedTensor* table() { return sharded_tensor("table"); }

 private:
  EmbeddingMlpOptions options_;
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

// Batches of `batch_size` (row, target) pairs drawn from (seed, step).
class SyntheticRegression : public lightning::DataSource {
 public:
  SyntheticRegression(int64_t vocab, int64_t batch_size, uint64_t seed, int64_t steps_per_epoch = 0);
  lightning::Batch GetBatch(int64_t step) const override;
  int64_t steps_per_epoch() const override { return steps_per_epoch_; }

 private:
  int64_t vocab_, batch_size_;
  uint64_t seed_;
  int64_t steps_per_epoch_;
};

}  // namespace shardlight::simulate

#endif  // SHARDLIGHT_SIMULATE_EMBEDDING_MLP_H_
