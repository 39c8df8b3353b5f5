// Input checks shared by the classification metrics (one place for the wording).
#ifndef SHARDLIGHT_LIGHTNING_METRICS_CLASS_CHECKS_H_
#define SHARDLIGHT_LIGHTNING_METRICS_CLASS_CHECKS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace shardlight::lightning::metrics {

// `ids` must be 1-d int64 class ids in [0, num_classes); `what` names it.
absl::Status CheckClassIds(const at::Tensor& ids, int64_t num_classes, const std::string& what);

// `scores` must be [n, num_classes] floating.
absl::Status CheckScores(const at::Tensor& scores, int64_t n, int64_t num_classes);

}  // namespace shardlight::lightning::metrics

#endif  // SHARDLIGHT_LIGHTNING_METRICS_CLASS_CHECKS_H_
