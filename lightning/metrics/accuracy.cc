#include "lightning/metrics/accuracy.h"

#include "absl/strings/str_cat.h"
#include "lightning/metrics/class_checks.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::metrics {

absl::StatusOr<Average> ParseAverage(std::string_view text) {
  for (Average a : {Average::kMicro, Average::kMacro, Average::kWeighted, Average::kNone}) {
    if (text == AverageName(a)) return a;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("average \"", std::string(text), "\" is none of micro, macro, weighted, none"));
}

const char* AverageName(Average average) {
  switch (average) {
    case Average::kMicro:
      return "micro";
    case Average::kMacro:
      return "macro";
    case Average::kWeighted:
      return "weighted";
    case Average::kNone:
      break;
  }
  return "none";
}

absl::StatusOr<std::shared_ptr<Accuracy>> Accuracy::Create(int64_t num_classes, int64_t top_k, Average average) {
  if (num_classes < 1 || top_k < 1 || top_k > num_classes) {
    return absl::InvalidArgumentError(absl::StrCat("Accuracy needs 1 <= top_k <= num_classes, got top_k=", top_k,
                                                   ", num_classes=", num_classes));
  }
  return std::shared_ptr<Accuracy>(new Accuracy(num_classes, top_k, average));
}

Accuracy::Accuracy(int64_t num_classes, int64_t top_k, Average average)
    : Metric("Accuracy"), num_classes_(num_classes), top_k_(top_k), average_(average) {
  AddState("tp", {num_classes}, at::kLong, Reduction::kSum);
  AddState("support", {num_classes}, at::kLong, Reduction::kSum);
  AddState("predicted", {num_classes}, at::kLong, Reduction::kSum);
}

std::string Accuracy::Describe() const {
  return absl::StrCat("classes=", num_classes_, " top_k=", top_k_, " average=", AverageName(average_));
}

absl::Status Accuracy::Update(const at::Tensor& scores, const at::Tensor& target) {
  SL_RETURN_IF_ERROR(CheckUsable());
  if (absl::Status s = CheckClassIds(target, num_classes_, "target"); !s.ok()) return Reject(s);
  if (absl::Status s = CheckScores(scores, target.size(0), num_classes_); !s.ok()) return Reject(s);
  if (target.numel() == 0) return absl::OkStatus();
  at::NoGradGuard no_grad;
  at::Tensor predicted;
  if (top_k_ == 1) {
    predicted = scores.argmax(1);  // the first of tied maxima
  } else {
    const at::Tensor top = std::get<1>(scores.topk(top_k_, /*dim=*/1));
    predicted = at::where(top.eq(target.unsqueeze(1)).any(1), target, top.select(1, 0));
  }
  const at::Tensor hit = predicted.eq(target).to(at::kLong);
  Local("tp").index_add_(0, target, hit);
  Local("support").index_add_(0, target, at::ones_like(target));
  Local("predicted").index_add_(0, predicted, at::ones_like(predicted));
  return absl::OkStatus();
}

absl::StatusOr<sharded::StateValue> Accuracy::ComputeValue() {
  const at::Tensor tp = Global("tp").to(at::kDouble);
  const at::Tensor support = Global("support").to(at::kDouble);
  const double total = support.sum().item<double>();
  if (total == 0) return absl::FailedPreconditionError("metric 'Accuracy': no rank has seen any sample");
  const at::Tensor recall = at::where(support.gt(0), tp / support.clamp_min(1), at::zeros_like(tp));
  switch (average_) {
    case Average::kMicro:
    case Average::kWeighted:  // sum(support * tp / support) / sum(support)
      return sharded::StateValue(tp.sum() / total);
    case Average::kNone:
      return sharded::StateValue(recall);
    case Average::kMacro:
      break;
  }
  // A class counts if it occurs: in targets or (top-1) predictions.
  at::Tensor occurs = support.gt(0);
  if (top_k_ == 1) occurs = occurs.logical_or(Global("predicted").gt(0));
  return sharded::StateValue((recall * occurs).sum() / occurs.sum());
}

}  // namespace shardlight::lightning::metrics
