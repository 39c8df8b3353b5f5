// MeanMetric: the weighted mean of every value seen on every rank. Its state
// is a mean reduction -- (weighted sum, weight) -- so a rank with no values
// weighs nothing; averaging per-rank means would be wrong with uneven or
// empty ranks.
#ifndef SHARDLIGHT_LIGHTNING_METRICS_MEAN_METRIC_H_
#define SHARDLIGHT_LIGHTNING_METRICS_MEAN_METRIC_H_

#include "lightning/metrics/metric.h"

namespace shardlight::lightning::metrics {

class MeanMetric : public Metric {
 public:
  MeanMetric();
  // Local. `values` floating, any shape; `weights` undefined (each value
  // weighs 1) or the same shape, non-negative.
  absl::Status Update(const at::Tensor& values, const at::Tensor& weights = at::Tensor());

 protected:
  // A double scalar; FailedPrecondition when the total weight is 0.
  absl::StatusOr<sharded::StateValue> ComputeValue() override;
};

}  // namespace shardlight::lightning::metrics

#endif  // SHARDLIGHT_LIGHTNING_METRICS_MEAN_METRIC_H_
