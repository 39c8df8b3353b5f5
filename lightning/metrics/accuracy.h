// Accuracy (top-k): the fraction of samples whose target class is among the
// k highest scores. States: correct and total counts (summed).
#ifndef SHARDLIGHT_LIGHTNING_METRICS_ACCURACY_H_
#define SHARDLIGHT_LIGHTNING_METRICS_ACCURACY_H_

#include <memory>

#include "lightning/metrics/metric.h"

namespace shardlight::lightning::metrics {

class Accuracy : public Metric {
 public:
  // InvalidArgument unless 1 <= top_k <= num_classes.
  static absl::StatusOr<std::shared_ptr<Accuracy>> Create(int64_t num_classes, int64_t top_k = 1);

  // Local. scores: [N, num_classes] floating; target: [N] int64 class ids in
  // [0, num_classes). N may be 0.
  absl::Status Update(const at::Tensor& scores, const at::Tensor& target);

  int64_t num_classes() const { return num_classes_; }
  int64_t top_k() const { return top_k_; }

 protected:
  Accuracy(int64_t num_classes, int64_t top_k);
  absl::StatusOr<sharded::StateValue> ComputeValue() override;
  std::string Describe() const override;

 private:
  int64_t num_classes_;
  int64_t top_k_;
};

}  // namespace shardlight::lightning::metrics

#endif  // SHARDLIGHT_LIGHTNING_METRICS_ACCURACY_H_
