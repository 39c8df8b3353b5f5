// The validation loop (Lightning's val_check_interval): every
// TrainerOptions::val_check_interval optimizer steps, and after the last, the
// Trainer runs LightningModule::ValidationStep on the batches
// val_data.GetBatch(0..n-1) (n = limit_val_batches, or the validation
// source's steps_per_epoch when that is 0) without gradients, and reduces
// what it logs across ranks: each logged value is this rank's part of the
// batch's value (summed over the loss group, as the training loss is), and
// the metric is the mean over the n batches -- Lightning's on_epoch mean of
// a value logged with sync_dist, for batches of one size. Callbacks get the
// metrics (Callback::OnValidationEnd); ModelCheckpoint and EarlyStopping
// (lightning/callbacks/) monitor them.
//
// Before the first training step a sanity pass (Lightning's
// num_sanity_val_steps, TrainerOptions::num_sanity_val_steps: 2 by default,
// -1 all n, 0 none) runs the first min(that, n) batches and checks that
// every monitored key is logged: InvalidArgument naming the key and what is
// logged, on every rank, before anything trains.
#ifndef SHARDLIGHT_LIGHTNING_VALIDATION_LOOP_H_
#define SHARDLIGHT_LIGHTNING_VALIDATION_LOOP_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lightning/lightning_module.h"
#include "lightning/strategies/strategy.h"
#include "lightning/trainer.h"

namespace shardlight::lightning {

// Collective. Runs ValidationStep on the batches 0..batches-1 of `val_data`
// inside the strategy's BeforeStep / ReduceGradients pair (so fsdp gathers
// the parameters and reshards them after, and one rank's failure -- a throw,
// an error, a value that is not a scalar, a batch logging other keys than
// the first -- fails every rank with its error). Returns the mean over the
// batches of each logged key's value summed over the loss group. Keys that
// differ between ranks: InvalidArgument naming both sets.
absl::StatusOr<std::map<std::string, double>> RunValidation(LightningModule& module, const DataSource& val_data,
                                                            int64_t batches, StrategyRun& parallel,
                                                            const Trainables& trainables, const StepContext& ctx);

// Collective. The sanity pass: RunValidation over the first `batches`
// batches, then InvalidArgument on every rank when a key of `monitored` is
// not logged ("monitor 'k' is not logged by ValidationStep (it logs: ...)").
absl::Status CheckMonitoredKeys(LightningModule& module, const DataSource& val_data, int64_t batches,
                                StrategyRun& parallel, const Trainables& trainables, const StepContext& ctx,
                                const std::vector<std::string>& monitored);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_VALIDATION_LOOP_H_
