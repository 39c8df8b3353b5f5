// LightningModule: the base class of a model trained by shardlight's Trainer.
//
// Its constructor asks the feature gate whether this build supports
// ShardedTensor state dicts. If so it registers the two ShardedTensor hooks
// on itself (they cover sharded members anywhere in its tree); if not it
// records why (gate().reason; printed to stderr when SHARDLIGHT_DEBUG is set), and registering a sharded member fails with
// an error naming the missing capability. Dense-only modules behave the same
// either way.
//
// ConfigureShardedModel() runs once a process group exists (the Trainer calls
// it on every rank): that is where sharded members are created, since a
// module is constructed before any group is up.
#ifndef SHARDLIGHT_LIGHTNING_LIGHTNING_MODULE_H_
#define SHARDLIGHT_LIGHTNING_LIGHTNING_MODULE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lightning/gate/feature_gate.h"
#include "lightning/lr_schedule.h"
#include "lightning/optimizer.h"
#include "lightning/sharded_module.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::lightning {

// What ConfigureShardedModel gets: the group and the run's seed.
struct ShardedContext {
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 0;
  // The device mesh of this rank under a strategy that lays the module out
  // on one (ModelParallelStrategy: data parallel x tensor parallel), from
  // which the module builds its tensor-parallel layers; null otherwise.
  sharded::mesh::MeshPtr mesh;
};

// One training batch: the tensors a DataSource produced for a step.
using Batch = std::vector<at::Tensor>;

// What ValidationStep logs: each key's value (a scalar) on this rank, its
// part of the batch's value (summed over ranks, like TrainingStep's loss).
using ValidationLog = std::map<std::string, at::Tensor>;

// What TrainingStep gets besides the batch.
struct StepContext {
  int64_t step = 0;  // 0-based global step
  int rank = 0;
  int world_size = 1;
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
};

// What a module trains with: an optimizer and, optionally, a step-based LR
// schedule (Lightning's configure_optimizers returning {"optimizer",
// "lr_scheduler": {"scheduler", "interval": "step"}}).
struct OptimizerConfig {
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<LrSchedule> lr_schedule;  // null: the optimizer's lr throughout
};

class LightningModule : public ShardedModule {
 public:
  explicit LightningModule(std::string name = "LightningModule", const FeatureDecision& gate = ShardedFeature());

  // Creates sharded members; the default creates none.
  virtual absl::Status ConfigureShardedModel(const ShardedContext& ctx);

  // This rank's part of the step's loss. The global loss is the sum over
  // ranks: the Trainer sums dense gradients across ranks (so a data-parallel
  // module that averages over its own batch divides by world_size), while
  // gradients of sharded members stay on their rank. The default fails with
  // Unimplemented: a module that is trained must override it.
  virtual absl::StatusOr<at::Tensor> TrainingStep(const Batch& batch, const StepContext& ctx);

  // One validation batch, without gradients (lightning/validation_loop.h):
  // the values to log. The default fails with Unimplemented: a module
  // validated with a validation source must override it.
  virtual absl::StatusOr<ValidationLog> ValidationStep(const Batch& batch, const StepContext& ctx);

  // The optimizer for TrainablesOf(*this); the default is Sgd with defaults.
  // Called after ConfigureShardedModel, so sharded members are included.
  virtual absl::StatusOr<std::unique_ptr<Optimizer>> ConfigureOptimizers();

  // What the Trainer calls: the optimizer and an LR schedule. The default is
  // ConfigureOptimizers() without a schedule, so a module that overrides only
  // ConfigureOptimizers keeps training as before; override this one to add a
  // schedule.
  virtual absl::StatusOr<OptimizerConfig> ConfigureOptimizersAndSchedule();

  bool sharded_hooks_registered() const { return hooks_registered_; }
  bool OwnsShardedHooks() const override { return hooks_registered_; }

  // The group a Trainer configured this module on (ConfigureShardedModel
  // succeeded on every rank of it); null before the first Fit. A later Fit on
  // the same group does not call ConfigureShardedModel again (trainer.h).
  const c10::intrusive_ptr<c10d::ProcessGroup>& configured_group() const { return configured_group_; }

 private:
  friend class Trainer;  // sets configured_group_

  c10::intrusive_ptr<c10d::ProcessGroup> configured_group_;
  bool hooks_registered_ = false;
  HookHandle state_dict_hook_;
  HookHandle load_pre_hook_;
};

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_LIGHTNING_MODULE_H_
