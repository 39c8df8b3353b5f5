#include "lightning/metrics/mean_metric.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::metrics {

MeanMetric::MeanMetric(NanStrategy nan_strategy) : MeanMetric("MeanMetric", nan_strategy) {}

MeanMetric::MeanMetric(std::string name, NanStrategy nan_strategy)
    : Metric(std::move(name)), nan_strategy_(nan_strategy) {
  AddState("mean", {}, at::kDouble, Reduction::kMean);
}

std::string MeanMetric::Describe() const { return absl::StrCat("nan_strategy=", nan_strategy_.Name()); }

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
  at::NoGradGuard no_grad;
  absl::StatusOr<std::pair<at::Tensor, at::Tensor>> kept =
      nan_strategy_.Apply(values.to(at::kDouble), w.to(at::kDouble), name(), &warned_);
  if (!kept.ok()) return Reject(kept.status());
  const auto& [v, kept_w] = *kept;
  if (kept_w.numel() > 0 && kept_w.min().item<double>() < 0) {
    return Reject(absl::InvalidArgumentError("negative weight"));
  }
  AddToMean("mean", (v * kept_w).sum(), kept_w.sum());
  return absl::OkStatus();
}

absl::StatusOr<sharded::StateValue> MeanMetric::ComputeValue() {
  if (MeanWeight("mean").item<double>() == 0) {
    return absl::FailedPreconditionError(absl::StrCat("metric '", name(), "': no rank has seen a value"));
  }
  return sharded::StateValue(Global("mean"));
}

}  // namespace shardlight::lightning::metrics
