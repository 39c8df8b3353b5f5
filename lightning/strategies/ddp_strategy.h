// DdpStrategy: data parallel, the Trainer's default (TrainerOptions::strategy
// null). Every rank holds every dense parameter; after backward the dense
// gradients are summed over the whole group in one flat allreduce that
// carries the step's verdict; sharded members' gradients stay on their rank.
// The loss is summed over the group.
//
// Setup errors (agreed by the Trainer as configure's): FailedPrecondition when
// the module's parameters are held sharded by an earlier FSDP Fit (fit it
// with FsdpStrategy, or resume a fresh module from a checkpoint).
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_DDP_STRATEGY_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_DDP_STRATEGY_H_

#include <memory>
#include <string>

#include "lightning/strategies/strategy.h"

namespace shardlight::lightning {

class DdpStrategy : public Strategy {
 public:
  std::string name() const override { return "ddp"; }
  absl::StatusOr<std::unique_ptr<StrategyRun>> Setup(LightningModule& module,
                                                     const ShardedContext& ctx) const override;
};

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_DDP_STRATEGY_H_
