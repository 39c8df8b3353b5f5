// A one-parameter model and its data for the loggers' tests: each step's
// loss is known only by running the Trainer, which is what the logs record.
#ifndef SHARDLIGHT_LIGHTNING_LOGGERS_LOGGED_FIT_MODEL_H_
#define SHARDLIGHT_LIGHTNING_LOGGERS_LOGGED_FIT_MODEL_H_

#include <ATen/ATen.h>

#include "lightning/lightning_module.h"
#include "lightning/trainer.h"

namespace shardlight::lightning::loggers {

class StepData : public DataSource {
 public:
  Batch GetBatch(int64_t step) const override { return {at::full({1}, 1.0 + 0.1 * step, at::kFloat)}; }
};

struct LoggedModel : LightningModule {
  LoggedModel() : LightningModule("LoggedModel") { w = register_parameter("w", at::full({1}, 2.0f)); }
  absl::StatusOr<at::Tensor> TrainingStep(const Batch& b, const StepContext& ctx) override {
    return (w * w * b[0]).sum() / static_cast<double>(ctx.world_size);
  }
  at::Tensor w;
};

}  // namespace shardlight::lightning::loggers

#endif  // SHARDLIGHT_LIGHTNING_LOGGERS_LOGGED_FIT_MODEL_H_
