// A small tensor-parallel MLP for the strategies that lay a module out on a
// DP x TP mesh (model_parallel, fsdp_tp): y = proj(gelu(fc(x))), fc
// column-parallel and proj row-parallel (//lightning/tp), trained with the
// mesh AdamW (or the mesh SGD) on a deterministic regression batch.
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_TP_TEST_MODEL_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_TP_TEST_MODEL_H_

#include <cstdint>
#include <memory>

#include "lightning/lightning_module.h"
#include "lightning/tp/parallel_linear.h"
#include "lightning/tp/tp_mesh.h"
#include "lightning/trainer.h"
#include "sharded/mesh/device_mesh.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning::tp_testing {

inline constexpr int64_t kBatch = 5;  // samples per step: DP 2 -> 3,2; DP 3 -> 2,2,1
inline constexpr int64_t kIn = 4, kHidden = 6, kOut = 3;  // hidden over TP 4: 2,2,2,0

class TinyTp : public LightningModule {
 public:
  // The DP group at coordinate `fail_dp` fails its TrainingStep at
  // `fail_step` (all its TP ranks: none waits for a peer). `dense`: a dense
  // parameter besides (which the mesh strategies refuse). `dtype`: the
  // members' and the compute's (the TP layers build float32, cast here).
  // `sgd`: tp::MeshSgdOptimizer (momentum 0.9, weight decay 0.01) instead of the mesh AdamW.
  explicit TinyTp(int fail_dp = -1, int64_t fail_step = -1, bool dense = false, c10::ScalarType dtype = at::kFloat,
                  bool sgd = false);
  absl::Status ConfigureShardedModel(const ShardedContext& ctx) override;
  absl::StatusOr<at::Tensor> TrainingStep(const Batch& batch, const StepContext& ctx) override;
  // "val_loss": the step's loss on the batch.
  absl::StatusOr<ValidationLog> ValidationStep(const Batch& batch, const StepContext& ctx) override;
  absl::StatusOr<std::unique_ptr<Optimizer>> ConfigureOptimizers() override;
  // fc's weight gradient on this rank (its local piece's).
  at::Tensor fc_grad() const;
  // The forward's output on this rank's share of `x` (its DP chunk of the rows).
  at::Tensor Predict(const at::Tensor& x) const;

 private:
  int64_t fail_dp_;
  int64_t fail_step_;
  c10::ScalarType dtype_;
  bool sgd_;
  tp::TpMesh tp_;
  std::shared_ptr<tp::ColumnParallelLinear> fc_;
  std::shared_ptr<tp::RowParallelLinear> proj_;
};

// kBatch samples of kIn features and kOut targets, by step.
class TinyData : public DataSource {
 public:
  Batch GetBatch(int64_t step) const override;
};

sharded::mesh::MeshContext MeshContextOf(const simulate::RankContext& ctx);

}  // namespace shardlight::lightning::tp_testing

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_TP_TEST_MODEL_H_
