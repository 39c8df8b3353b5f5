// ConfusionMatrix: counts[t][p] of samples of true class t predicted as p,
// over every rank's data. The num_classes x num_classes state is a sharded
// state split by rows (true classes) over the bound group, so each rank holds
// about 1/W of it; updates are buffered as (t, p) pairs and routed to the
// owning rank by Sync. Compute returns the matrix as a ShardedTensor (the same
// global value on every rank, each rank holding its rows); ComputeScalar is
// the overall accuracy (trace / total).
#ifndef SHARDLIGHT_LIGHTNING_METRICS_CONFUSION_MATRIX_H_
#define SHARDLIGHT_LIGHTNING_METRICS_CONFUSION_MATRIX_H_

#include <memory>

#include "lightning/metrics/metric.h"

namespace shardlight::lightning::metrics {

class ConfusionMatrix : public Metric {
 public:
  // InvalidArgument unless num_classes >= 1.
  static absl::StatusOr<std::shared_ptr<ConfusionMatrix>> Create(int64_t num_classes);

  // Local. preds: [N] int64 class ids, or [N, num_classes] floating scores
  // (argmax taken); target: [N] int64 class ids in [0, num_classes).
  absl::Status Update(const at::Tensor& preds, const at::Tensor& target);

  // Collective: trace / total of the synced matrix.
  absl::StatusOr<double> ComputeScalar() override;

  int64_t num_classes() const { return num_classes_; }

 protected:
  explicit ConfusionMatrix(int64_t num_classes);
  absl::StatusOr<sharded::StateValue> ComputeValue() override;
  std::string Describe() const override;

 private:
  int64_t num_classes_;
};

}  // namespace shardlight::lightning::metrics

#endif  // SHARDLIGHT_LIGHTNING_METRICS_CONFUSION_MATRIX_H_
