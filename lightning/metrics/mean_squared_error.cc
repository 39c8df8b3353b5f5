#include "lightning/metrics/mean_squared_error.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::metrics {

MeanSquaredError::MeanSquaredError() : Metric("MeanSquaredError") {
  AddState("sum_squared_error", {}, at::kDouble, Reduction::kSum);
  AddState("total", {}, at::kLong, Reduction::kSum);
}

absl::Status MeanSquaredError::Update(const at::Tensor& preds, const at::Tensor& target) {
  SL_RETURN_IF_ERROR(CheckUsable());
  if (!preds.defined() || !target.defined()) return Reject(absl::InvalidArgumentError("undefined preds or target"));
  if (preds.sizes() != target.sizes()) {
    return Reject(absl::InvalidArgumentError(absl::StrCat("preds have shape [", absl::StrJoin(preds.sizes(), ", "),
                                                          "] but target has [", absl::StrJoin(target.sizes(), ", "),
                                                          "]")));
  }
  if (!at::isFloatingType(preds.scalar_type()) || preds.scalar_type() != target.scalar_type()) {
    return Reject(absl::InvalidArgumentError(absl::StrCat("preds (", c10::toString(preds.scalar_type()),
                                                          ") and target (", c10::toString(target.scalar_type()),
                                                          ") must share one floating dtype")));
  }
  at::NoGradGuard no_grad;
  Local("sum_squared_error").add_((preds.to(at::kDouble) - target.to(at::kDouble)).pow(2).sum());
  Local("total").add_(preds.numel());
  return absl::OkStatus();
}

absl::StatusOr<sharded::StateValue> MeanSquaredError::ComputeValue() {
  const int64_t total = Global("total").item<int64_t>();
  if (total == 0) return absl::FailedPreconditionError("metric 'MeanSquaredError': no rank has seen any element");
  return sharded::StateValue(Global("sum_squared_error") / static_cast<double>(total));
}

}  // namespace shardlight::lightning::metrics
