#include "lightning/metrics/cat_metric.h"

#include "absl/strings/str_cat.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::metrics {

CatMetric::CatMetric() : Metric("CatMetric") { AddState("values", {}, at::kDouble, Reduction::kCat); }

absl::Status CatMetric::Update(const at::Tensor& values) {
  SL_RETURN_IF_ERROR(CheckUsable());
  if (!values.defined() || !at::isFloatingType(values.scalar_type())) {
    return Reject(absl::InvalidArgumentError(absl::StrCat(
        "values must be floating, got ", values.defined() ? c10::toString(values.scalar_type()) : "undefined")));
  }
  Append("values", values.reshape({-1}));
  return absl::OkStatus();
}

absl::StatusOr<sharded::StateValue> CatMetric::ComputeValue() { return sharded::StateValue(Global("values")); }

}  // namespace shardlight::lightning::metrics
