// Test support for the strategies: a dense MLP whose dims make dim-0 chunks
// uneven and empty at W = 3 and 4, trained data-parallel on a fixed stream of
// batches, so the same run can be compared across strategies and world
// sizes.
//
//   blocks.0  Linear(6, hidden)   weight [hidden, 6]
//   blocks.1  Linear(hidden, 3)   weight [3, hidden]: W=4 -> 1,1,1,0 rows
//   head      Linear(3, 1)        weight [1, 3], bias [1]: empty on W-1 ranks
//
// blocks.0 and blocks.1 run through RunFsdpUnit (fsdp_unit.h): per-unit
// under FsdpOptions::per_unit, plain forwards anywhere else.
//
// Every value comes from the seed (sharded/global_random.h), never torch's
// generator. Rank r scores its torch.chunk of the batch's rows and returns
// sum(squared error) / B, so the ranks' losses sum to the batch's MSE.
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_TEST_MODEL_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_TEST_MODEL_H_

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>

#include "lightning/lightning_module.h"
#include "lightning/trainer.h"

namespace shardlight::lightning::testing {

struct MlpOptions {
  int64_t hidden = 7;
  double lr = 0.05;
  double momentum = 0.9;
  double weight_decay = 0.01;
  // TrainingStep fails with DataLoss on this rank at this step (-1: never).
  int fail_rank = -1;
  int64_t fail_step = -1;
  // With fail_rank/fail_step: fail after blocks.0's forward, not before any.
  bool fail_after_first_unit = false;
  // This rank's TrainingStep returns a constant loss without entering any
  // unit (-1: none): per-unit fsdp must fail the step on every rank.
  int skip_units_rank = -1;
  // Parameters and batches in this dtype.
  c10::ScalarType dtype = at::kFloat;
  // Registers blocks.1's weight a second time, as head's "tied" (a shared parameter).
  bool tie = false;
};

class Mlp : public LightningModule {
 public:
  explicit Mlp(MlpOptions options = {});
  absl::Status ConfigureShardedModel(const ShardedContext& ctx) override;
  absl::StatusOr<at::Tensor> TrainingStep(const Batch& batch, const StepContext& ctx) override;
  // {"val_loss": this rank's share of the batch's MSE}, without gradients.
  absl::StatusOr<ValidationLog> ValidationStep(const Batch& batch, const StepContext& ctx) override;
  absl::StatusOr<std::unique_ptr<Optimizer>> ConfigureOptimizers() override;

 private:
  MlpOptions options_;
  torch::nn::ModuleList blocks_{nullptr};
  torch::nn::Linear head_{nullptr};
};

// Batches of (x [B, 6], y [B]) drawn from (seed, step).
class MlpData : public DataSource {
 public:
  MlpData(int64_t batch_size, uint64_t seed, c10::ScalarType dtype = at::kFloat)
      : batch_size_(batch_size), seed_(seed), dtype_(dtype) {}
  Batch GetBatch(int64_t step) const override;

 private:
  int64_t batch_size_;
  uint64_t seed_;
  c10::ScalarType dtype_;
};

}  // namespace shardlight::lightning::testing

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_TEST_MODEL_H_
