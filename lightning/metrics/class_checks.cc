#include "lightning/metrics/class_checks.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardlight::lightning::metrics {

absl::Status CheckClassIds(const at::Tensor& ids, int64_t num_classes, const std::string& what) {
  if (!ids.defined() || ids.dim() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be a 1-d tensor of class ids, got shape [",
                                                   ids.defined() ? absl::StrJoin(ids.sizes(), ", ") : "undefined",
                                                   "]"));
  }
  if (ids.scalar_type() != at::kLong) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be int64 class ids, got ", c10::toString(ids.scalar_type())));
  }
  if (ids.numel() == 0) return absl::OkStatus();
  const int64_t lo = ids.min().item<int64_t>();
  const int64_t hi = ids.max().item<int64_t>();
  if (lo < 0 || hi >= num_classes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " holds class id ", lo < 0 ? lo : hi,
                                                   " outside [0, ", num_classes, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckScores(const at::Tensor& scores, int64_t n, int64_t num_classes) {
  if (!scores.defined() || scores.dim() != 2 || scores.size(0) != n || scores.size(1) != num_classes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scores must have shape [", n, ", ", num_classes, "] (samples, classes), got [",
        scores.defined() ? absl::StrJoin(scores.sizes(), ", ") : "undefined", "]"));
  }
  if (!at::isFloatingType(scores.scalar_type())) {
    return absl::InvalidArgumentError(
        absl::StrCat("scores must be floating, got ", c10::toString(scores.scalar_type())));
  }
  return absl::OkStatus();
}

}  // namespace shardlight::lightning::metrics
