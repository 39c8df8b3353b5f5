#include "lightning/metrics/mean_metric.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::metrics {

MeanMetric::MeanMetric() : Metric("MeanMetric") { AddState("mean", {}, at::kDouble, Reduction::kMean); }

absl::Status MeanMetric::Update(const at::Tensor& values, const at::Tensor& weights) {
  SL_RETURN_IF_ERROR(CheckUsable());
  if (!values.defined() || !at::isFloatingType(values.scalar_type())) {
    return Reject(absl::InvalidArgumentError(absl::StrCat(
        "values must be floating, got ", values.defined() ? c10::toString(values.scalar_type()) : "undefined")));
  }
  at::Tensor w = weights.defined() ? weights : at::ones_like(values, at::kDouble);
  if (w.sizes() != values.sizes()) {
    return Reject(absl::InvalidArgumentError(absl::StrCat("weights have shape [", absl::StrJoin(w.sizes(), ", "),
                                                          "] but values have [", absl::StrJoin(values.sizes(), ", "),
                                                          "]")));
  }
  w = w.to(at::kDouble);
  if (w.numel() > 0 && w.min().item<double>() < 0) return Reject(absl::InvalidArgumentError("negative weight"));
  at::NoGradGuard no_grad;
  AddToMean("mean", (values.to(at::kDouble) * w).sum(), w.sum());
  return absl::OkStatus();
}

absl::StatusOr<sharded::StateValue> MeanMetric::ComputeValue() {
  if (MeanWeight("mean").item<double>() == 0) {
    return absl::FailedPreconditionError("metric 'MeanMetric': no rank has seen a value");
  }
  return sharded::StateValue(Global("mean"));
}

}  // namespace shardlight::lightning::metrics
