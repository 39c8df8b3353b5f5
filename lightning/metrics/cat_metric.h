// CatMetric: every value seen on every rank, concatenated (a cat reduction).
// Compute returns a 1-d double tensor: what earlier syncs gathered first,
// then each sync's values in rank order. Its size is only known from the
// data, so a checkpoint stores it with its row count (see metric.h).
#ifndef SHARDLIGHT_LIGHTNING_METRICS_CAT_METRIC_H_
#define SHARDLIGHT_LIGHTNING_METRICS_CAT_METRIC_H_

#include "lightning/metrics/metric.h"

namespace shardlight::lightning::metrics {

class CatMetric : public Metric {
 public:
  CatMetric();
  // Local. `values` floating, any shape (flattened).
  absl::Status Update(const at::Tensor& values);

 protected:
  absl::StatusOr<sharded::StateValue> ComputeValue() override;
};

}  // namespace shardlight::lightning::metrics

#endif  // SHARDLIGHT_LIGHTNING_METRICS_CAT_METRIC_H_
