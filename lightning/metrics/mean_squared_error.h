// MeanSquaredError: mean of (preds - target)^2 over every element seen on
// every rank. States: sum of squared errors and element count (both summed),
// so ranks with no data add nothing.
#ifndef SHARDLIGHT_LIGHTNING_METRICS_MEAN_SQUARED_ERROR_H_
#define SHARDLIGHT_LIGHTNING_METRICS_MEAN_SQUARED_ERROR_H_

#include "lightning/metrics/metric.h"

namespace shardlight::lightning::metrics {

class MeanSquaredError : public Metric {
 public:
  MeanSquaredError();
  // Local. preds and target: the same shape and the same floating dtype.
  absl::Status Update(const at::Tensor& preds, const at::Tensor& target);

 protected:
  // A double scalar; FailedPrecondition when no rank has seen an element.
  absl::StatusOr<sharded::StateValue> ComputeValue() override;
};

}  // namespace shardlight::lightning::metrics

#endif  // SHARDLIGHT_LIGHTNING_METRICS_MEAN_SQUARED_ERROR_H_
