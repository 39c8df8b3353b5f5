// MeanMetric: the weighted mean of every value seen on every rank. Its state
// is a mean reduction -- (weighted sum, weight) -- so a rank with no values
// weighs nothing; averaging per-rank means would be wrong with uneven or
// empty ranks. NaN values follow `nan_strategy` (nan_strategy.h; torchmetrics'
// names, default "warn": dropped with a warning). Where torchmetrics' compute
// returns NaN for no values at all, Compute is FailedPrecondition.
#ifndef SHARDLIGHT_LIGHTNING_METRICS_MEAN_METRIC_H_
#define SHARDLIGHT_LIGHTNING_METRICS_MEAN_METRIC_H_

#include <string>

#include "lightning/metrics/metric.h"
#include "lightning/metrics/nan_strategy.h"

namespace shardlight::lightning::metrics {

class MeanMetric : public Metric {
 public:
  explicit MeanMetric(NanStrategy nan_strategy = NanStrategy());
  // Local. `values` floating, any shape; `weights` undefined (each value
  // weighs 1) or the same shape, non-negative. InvalidArgument otherwise, or
  // on a NaN under nan_strategy "error".
  absl::Status Update(const at::Tensor& values, const at::Tensor& weights = at::Tensor());

  const NanStrategy& nan_strategy() const { return nan_strategy_; }

 protected:
  // For metrics built on a mean (Perplexity): their own name in errors and
  // in the cross-rank fingerprint.
  MeanMetric(std::string name, NanStrategy nan_strategy);
  // A double scalar; FailedPrecondition when the total weight is 0.
  absl::StatusOr<sharded::StateValue> ComputeValue() override;
  std::string Describe() const override;

 private:
  NanStrategy nan_strategy_;
  bool warned_ = false;
};

}  // namespace shardlight::lightning::metrics

#endif  // SHARDLIGHT_LIGHTNING_METRICS_MEAN_METRIC_H_
