#include "lightning/metrics/accuracy.h"

#include "absl/strings/str_cat.h"
#include "lightning/metrics/class_checks.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::metrics {

absl::StatusOr<std::shared_ptr<Accuracy>> Accuracy::Create(int64_t num_classes, int64_t top_k) {
  if (num_classes < 1 || top_k < 1 || top_k > num_classes) {
    return absl::InvalidArgumentError(absl::StrCat("Accuracy needs 1 <= top_k <= num_classes, got top_k=", top_k,
                                                   ", num_classes=", num_classes));
  }
  return std::shared_ptr<Accuracy>(new Accuracy(num_classes, top_k));
}

Accuracy::Accuracy(int64_t num_classes, int64_t top_k)
    : Metric("Accuracy"), num_classes_(num_classes), top_k_(top_k) {
  AddState("correct", {}, at::kLong, Reduction::kSum);
  AddState("total", {}, at::kLong, Reduction::kSum);
}

std::string Accuracy::Describe() const { return absl::StrCat("classes=", num_classes_, " top_k=", top_k_); }

absl::Status Accuracy::Update(const at::Tensor& scores, const at::Tensor& target) {
  SL_RETURN_IF_ERROR(CheckUsable());
  if (absl::Status s = CheckClassIds(target, num_classes_, "target"); !s.ok()) return Reject(s);
  if (absl::Status s = CheckScores(scores, target.size(0), num_classes_); !s.ok()) return Reject(s);
  if (target.numel() == 0) return absl::OkStatus();
  at::NoGradGuard no_grad;
  const at::Tensor top = std::get<1>(scores.topk(top_k_, /*dim=*/1));
  Local("correct").add_(top.eq(target.unsqueeze(1)).any(1).sum());
  Local("total").add_(target.numel());
  return absl::OkStatus();
}

absl::StatusOr<sharded::StateValue> Accuracy::ComputeValue() {
  const int64_t total = Global("total").item<int64_t>();
  if (total == 0) return absl::FailedPreconditionError("metric 'Accuracy': no rank has seen any sample");
  return sharded::StateValue(at::scalar_tensor(static_cast<double>(Global("correct").item<int64_t>()) / total,
                                               at::kDouble));
}

}  // namespace shardlight::lightning::metrics
