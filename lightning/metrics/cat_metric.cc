#include "lightning/metrics/cat_metric.h"

#include "absl/strings/str_cat.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::metrics {

CatMetric::CatMetric(NanStrategy nan_strategy) : Metric("CatMetric"), nan_strategy_(nan_strategy) {
  AddState("values", {}, at::kDouble, Reduction::kCat);
}

std::string CatMetric::Describe() const { return absl::StrCat("nan_strategy=", nan_strategy_.Name()); }

absl::Status CatMetric::Update(const at::Tensor& values) {
  SL_RETURN_IF_ERROR(CheckUsable());
  if (!values.defined() || !at::isFloatingType(values.scalar_type())) {
    return Reject(absl::InvalidArgumentError(absl::StrCat(
        "values must be floating, got ", values.defined() ? c10::toString(values.scalar_type()) : "undefined")));
  }
  const at::Tensor flat = values.reshape({-1}).to(at::kDouble);
  absl::StatusOr<std::pair<at::Tensor, at::Tensor>> kept =
      nan_strategy_.Apply(flat, at::ones_like(flat), name(), &warned_);
  if (!kept.ok()) return Reject(kept.status());
  Append("values", kept->first);
  return absl::OkStatus();
}

absl::StatusOr<sharded::StateValue> CatMetric::ComputeValue() { return sharded::StateValue(Global("values")); }

}  // namespace shardlight::lightning::metrics
