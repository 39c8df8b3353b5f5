// The local work of one optimizer step, between the strategy's BeforeStep and
// ReduceGradients (lightning/strategies/strategy.h), and what follows the
// reduction: gradient accumulation over micro-batches, clipping by value.
//
// Accumulation (TrainerOptions::accumulate_grad_batches = k, Lightning's
// accumulate_grad_batches): optimizer step s takes the k micro-batches
// data.GetBatch(s * k + i), i = 0..k-1, runs TrainingStep and backward on
// each with the loss divided by k (as Lightning scales the loss before
// backward), so the gradients accumulate in .grad and equal those of the mean
// of the k losses; no communication happens until the strategy reduces them
// once, after the k-th. The step's loss is the mean of the k micro-batch
// losses. k = 1 is the plain step (GetBatch(s)).
#ifndef SHARDLIGHT_LIGHTNING_OPTIMIZER_STEP_H_
#define SHARDLIGHT_LIGHTNING_OPTIMIZER_STEP_H_

#include <cstdint>

#include "absl/status/status.h"
#include "lightning/lightning_module.h"
#include "lightning/trainable.h"
#include "lightning/trainer.h"

namespace shardlight::lightning {

// The index of micro-batch `micro` (0-based) of optimizer step `step` with
// `accumulate` micro-batches a step: step * accumulate + micro.
inline int64_t MicroBatchIndex(int64_t step, int64_t accumulate, int64_t micro) { return step * accumulate + micro; }

// GetBatch, TrainingStep and backward for the `accumulate` micro-batches of
// `ctx.step` on this rank; `*loss` is the mean of their losses (a double
// scalar). Local: no communication. Errors (also a throw): the first failing
// micro-batch's, with gradients then partly accumulated (the strategy counts
// a failed rank's as zeros); InvalidArgument when a loss is not a scalar.
// `autocast`: TrainingStep (not backward) under CPU autocast to bfloat16
// (precision "bf16-mixed", lightning/precision.h).
absl::Status AccumulateMicroBatches(LightningModule& module, const DataSource& data, const StepContext& ctx,
                                    int64_t accumulate, at::Tensor* loss, bool autocast = false);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_OPTIMIZER_STEP_H_
