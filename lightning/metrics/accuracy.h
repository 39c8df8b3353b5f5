// Accuracy (top-k, multiclass) as torchmetrics' MulticlassAccuracy computes it.
// A sample's prediction is its target when the target is among the k highest
// scores, else its top-1 class; with top_k = 1 that is argmax, which takes
// the first of tied maxima (as torch.argmax and torchmetrics do).
// States (summed over ranks): per class, true positives, support (samples of
// that class) and predictions (samples predicted as it).
//
// `average` (torchmetrics' names and semantics):
//   "micro" (the default here; torchmetrics' default is "macro"): correct /
//       total over all samples.
//   "macro": the mean over classes of tp / support; a class counts only if it
//       occurs -- with top_k = 1, in the targets or the predictions (one that
//       is only predicted scores 0); with top_k > 1, in the targets.
//   "weighted": the support-weighted mean of the classes' tp / support.
//   "none": a [num_classes] double tensor of tp / support (0 for a class with
//       no support); ComputeScalar is then an error.
#ifndef SHARDLIGHT_LIGHTNING_METRICS_ACCURACY_H_
#define SHARDLIGHT_LIGHTNING_METRICS_ACCURACY_H_

#include <memory>
#include <string>
#include <string_view>

#include "lightning/metrics/metric.h"

namespace shardlight::lightning::metrics {

enum class Average { kMicro, kMacro, kWeighted, kNone };
// "micro", "macro", "weighted", "none"; InvalidArgument naming `text` otherwise.
absl::StatusOr<Average> ParseAverage(std::string_view text);
const char* AverageName(Average average);

class Accuracy : public Metric {
 public:
  // InvalidArgument unless 1 <= top_k <= num_classes.
  static absl::StatusOr<std::shared_ptr<Accuracy>> Create(int64_t num_classes, int64_t top_k = 1,
                                                          Average average = Average::kMicro);

  // Local. scores: [N, num_classes] floating; target: [N] int64 class ids in
  // [0, num_classes). N may be 0.
  absl::Status Update(const at::Tensor& scores, const at::Tensor& target);

  int64_t num_classes() const { return num_classes_; }
  int64_t top_k() const { return top_k_; }
  Average average() const { return average_; }

 protected:
  Accuracy(int64_t num_classes, int64_t top_k, Average average);
  // A double scalar ("none": [num_classes]); FailedPrecondition when no rank
  // has seen a sample.
  absl::StatusOr<sharded::StateValue> ComputeValue() override;
  std::string Describe() const override;

 private:
  int64_t num_classes_;
  int64_t top_k_;
  Average average_;
};

}  // namespace shardlight::lightning::metrics

#endif  // SHARDLIGHT_LIGHTNING_METRICS_ACCURACY_H_
