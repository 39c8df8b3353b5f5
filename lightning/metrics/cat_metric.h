// CatMetric: every value seen on every rank, concatenated (a cat reduction).
// Compute returns a 1-d double tensor: what earlier syncs gathered first,
// then each sync's values in rank order. Its size is only known from the
// data, so a checkpoint stores it with its row count (see metric.h). NaN
// values follow `nan_strategy` (nan_strategy.h; torchmetrics' names, default
// "warn": dropped with a warning).
#ifndef SHARDLIGHT_LIGHTNING_METRICS_CAT_METRIC_H_
#define SHARDLIGHT_LIGHTNING_METRICS_CAT_METRIC_H_

#include <string>

#include "lightning/metrics/metric.h"
#include "lightning/metrics/nan_strategy.h"

namespace shardlight::lightning::metrics {

class CatMetric : public Metric {
 public:
  explicit CatMetric(NanStrategy nan_strategy = NanStrategy());
  // Local. `values` floating, any shape (flattened). InvalidArgument
  // otherwise, or on a NaN under nan_strategy "error".
  absl::Status Update(const at::Tensor& values);

  const NanStrategy& nan_strategy() const { return nan_strategy_; }

 protected:
  absl::StatusOr<sharded::StateValue> ComputeValue() override;
  std::string Describe() const override;

 private:
  NanStrategy nan_strategy_;
  bool warned_ = false;
};

}  // namespace shardlight::lightning::metrics

#endif  // SHARDLIGHT_LIGHTNING_METRICS_CAT_METRIC_H_
