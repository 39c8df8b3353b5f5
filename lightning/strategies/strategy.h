// Strategy: how the Trainer's one loop lays out parameters and reduces
// gradients across ranks -- data parallel (ddp_strategy.h), fully sharded
// data parallel (fsdp_strategy.h) -- as Lightning separates its Strategy from
// the loop. The loop is the same for every strategy; it calls the strategy at
// fixed points (lightning/trainer.h):
//
//   ConfigureShardedModel -> Strategy::Setup -> ConfigureOptimizers -> resume
//   -> per step: ZeroGrad, StrategyRun::BeforeStep, TrainingStep + backward,
//      StrategyRun::ReduceGradients, optimizer step, the loss summed over
//      StrategyRun::loss_group() -> ...
//
// Setup comes before ConfigureOptimizers because a strategy may change what
// the optimizer sees (FSDP shards the parameters; the optimizer must be built
// over the shards, as FSDP2 requires fully_shard before the optimizer).
//
// A Strategy is options only: immutable and shareable (one instance may serve
// every thread-rank of the simulator). What one rank's Fit needs to remember
// lives in the StrategyRun that Setup returns, which the Trainer owns for the
// Fit.
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_STRATEGY_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_STRATEGY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lightning/lightning_module.h"
#include "lightning/strategies/gradient_clipping.h"
#include "lightning/trainable.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::lightning {

class PhaseTimes;  // lightning/phase_times.h

// One rank's strategy for one Fit. Every method but loss_group() is
// collective: every rank of the group calls it at the same point of the loop.
class StrategyRun {
 public:
  virtual ~StrategyRun() = default;

  // Before the step's TrainingStep: make the parameters ready for the
  // forward (FSDP: all-gather them). Errors: Unavailable naming the
  // collective when a peer fails (the same on every rank).
  virtual absl::Status BeforeStep(int64_t step) = 0;

  // After backward: reduce the gradients of `trainables` (this Fit's
  // TrainablesOf the module, taken after Setup) across ranks, and agree on
  // the step: `local` is this rank's verdict on GetBatch/TrainingStep/
  // backward. Carried in the reduction itself, so one rank's failure fails
  // every rank with that rank's error ("<op> failed on rank R: ...") without
  // an extra exchange and without a rank left waiting. A failed rank's
  // gradients count as zeros. Leaves the parameters as the optimizer steps
  // them (FSDP: their shards, each with its gradient shard), also on error.
  virtual absl::Status ReduceGradients(const Trainables& trainables, const absl::Status& local,
                                       absl::string_view op) = 0;

  // The group over which the ranks' losses are summed into the step's loss.
  virtual c10d::ProcessGroup& loss_group() = 0;

  // After ReduceGradients (collective): scales the gradients so that their
  // global 2-norm over the whole model is at most max_norm and returns the
  // norm before clipping. The default counts `trainables` (dense ones once,
  // sharded ones summed over loss_group()); a strategy whose parameters the
  // Trainables do not describe (mesh members) overrides it. Errors as
  // ClipGradientNorm's (gradient_clipping.h).
  virtual absl::StatusOr<double> ClipGradients(const Trainables& trainables, double max_norm, absl::string_view op) {
    return ClipGradientNorm(trainables, loss_group(), max_norm, op);
  }

  // After ReduceGradients: clamps every gradient element this rank holds to
  // [-clip_value, clip_value] (no communication). The default clamps
  // `trainables`; a strategy whose parameters they do not describe (mesh
  // members) overrides it.
  virtual void ClipGradientValues(const Trainables& trainables, double clip_value) {
    ClipGradientValue(trainables, clip_value);
  }

  // Checkpoints, at a save and before a resume's load: replaces, in `dict`,
  // each ShardedTensor this strategy holds replicated across ranks (HSDP's
  // shards) with its checkpoint view over the world, each piece written
  // once. No communication. The default changes nothing.
  virtual absl::Status UseCheckpointViews(sharded::StateDict& dict) { return absl::OkStatus(); }

  // After a load into the dict UseCheckpointViews last changed (collective):
  // the values each piece's writer loaded reach its other replicas.
  virtual absl::Status CompleteCheckpointLoad(absl::string_view op) { return absl::OkStatus(); }

  // After Setup: where to add the time of this run's collectives
  // (TrainerOptions::phase_times; null: nowhere). The default times nothing.
  virtual void UsePhaseTimes(PhaseTimes* /*times*/) {}
};

class Strategy {
 public:
  virtual ~Strategy() = default;

  // "ddp", "fsdp", "model_parallel": for messages.
  virtual std::string name() const = 0;

  // The device mesh this rank's module is laid out on, handed to
  // ConfigureShardedModel (ShardedContext::mesh) before Setup; null for
  // strategies without one. No collective.
  virtual sharded::mesh::MeshPtr mesh() const { return nullptr; }

  // Whether this strategy's options agree with the Trainer's precision
  // ("32-true", "bf16-mixed", "bf16-true"; already parsed and supported).
  // Local, on every rank before anything collective: InvalidArgument naming
  // both. The default accepts every precision.
  virtual absl::Status CheckPrecision(const std::string& /*precision*/) const { return absl::OkStatus(); }

  // After ConfigureShardedModel, before ConfigureOptimizers, on every rank:
  // lays the module's parameters out (FSDP shards them). Local only -- no
  // collective -- so the Trainer agrees on its verdict together with
  // configure's ("configure failed on rank R: ..."): a bad option is an
  // error on every rank before anything could hang. Called at every Fit,
  // also the second Fit of a module on the same group, which keeps the layout
  // the first made.
  virtual absl::StatusOr<std::unique_ptr<StrategyRun>> Setup(LightningModule& module,
                                                             const ShardedContext& ctx) const = 0;
};

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_STRATEGY_H_
