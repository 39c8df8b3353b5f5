// FsdpStrategy: fully sharded data parallel (ZeRO-3), PyTorch FSDP2's
// fully_shard in the Trainer's loop. Every rank runs the whole model on its
// own data, as with ddp; what differs is what a rank keeps between steps.
//
// Layout. Each dense parameter P with requires_grad and at least one dim
// lives, between steps, as only this rank's dim-0 chunk, torch.chunk's split
// over the group (uneven and empty chunks allowed: a dim 0 of 3 on 4 ranks
// leaves rank 3 a [0, ...] shard). The registered variable stays: Setup swaps
// its data for the chunk (set_data), so the user's forward and autograd use
// the module as written, and the chunk is also a sharded::ShardedTensor
// (ChunkShardingSpec dim 0) that the root module holds in P's place
// (ShardedModule::HoldParameterSharded). Why there: the three things that
// must see sharded state already read the module -- TrainablesOf lists the
// shard instead of P (so Sgd's momentum is ZerosLike of it, sharded), the
// LightningModule's state-dict hook puts the ShardedTensor under P's key
// (keys unchanged: a ddp checkpoint resumes under fsdp and back, on any world
// size, through the checkpoint's resharding), and its load pre-hook loads
// into it. Nothing in the optimizers, the checkpoint or the Trainer knows
// FSDP exists. Parameters without requires_grad, and 0-dim ones, stay dense
// on every rank (their gradients, if any, are summed as ddp's).
//
// A step. BeforeStep all-gathers every unit's shards (one collective per unit
// and dtype, each rank's chunk padded to the largest so the ranks send equal
// sizes) and sets each P to its full tensor; after backward, ReduceGradients
// reduce-scatters each unit's full gradients (one collective per unit and
// dtype; reduce_scatter.h: c10d's reduce_scatter where the backend has it,
// else allreduce + narrow), gives each shard its gradient chunk, and sets P
// back to its shard, dropping the full tensors and gradients. The first of
// these reductions carries the step's verdict, so one rank's failing
// TrainingStep fails every rank with its error and no rank waits.
//
// Units (FsdpOptions::units, fsdp_units.h) group the parameters into those
// collectives as fully_shard applied bottom-up does; the root holds what no
// unit claims. In this version every unit is gathered at the start of the
// step and resharded after backward (memory in the step is the whole model,
// as ddp; between steps 1/W): per-unit gathering in the forward, freeing
// after it (reshard_after_forward), re-gathering in backward and prefetch are
// not implemented yet. Why not simply: those collectives would run inside
// the user's TrainingStep and backward, and a rank whose TrainingStep fails
// before a unit's forward would leave its peers in that unit's all-gather
// (the verdict only travels with the reduction after backward). Per-unit
// gathering needs every unit collective to carry a failure flag and a failed
// rank to join the remaining schedule of them (zeros, flag set) until its
// peers stop at the same one.
//
// Setup errors (agreed by the Trainer, on every rank, before any collective):
// FailedPrecondition when the build lacks ShardedTensor support (the module
// registered no hooks), when the module is held sharded on another group by
// an earlier Fit, or its held layout differs from this plan; InvalidArgument
// for a bad unit list (fsdp_units.h).
//
// Precondition: at Setup every rank's module holds the same values (as ddp
// assumes: build them from the seed). Each rank keeps its chunk of its own.
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_STRATEGY_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_STRATEGY_H_

#include <memory>
#include <string>
#include <vector>

#include "lightning/strategies/strategy.h"

namespace shardlight::lightning {

struct FsdpOptions {
  // Submodules (dotted paths from the root: "blocks.0") that are units.
  std::vector<std::string> units;
  // Use c10d's reduce_scatter where a probe at the first step finds it works;
  // false: always allreduce + narrow.
  bool reduce_scatter = true;
};

class FsdpStrategy : public Strategy {
 public:
  explicit FsdpStrategy(FsdpOptions options = {}) : options_(std::move(options)) {}
  std::string name() const override { return "fsdp"; }
  absl::StatusOr<std::unique_ptr<StrategyRun>> Setup(LightningModule& module,
                                                     const ShardedContext& ctx) const override;
  const FsdpOptions& options() const { return options_; }

 private:
  FsdpOptions options_;
};

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_STRATEGY_H_
