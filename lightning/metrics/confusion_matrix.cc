#include "lightning/metrics/confusion_matrix.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "lightning/metrics/class_checks.h"
#include "sharded/collectives.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::metrics {

absl::StatusOr<std::shared_ptr<ConfusionMatrix>> ConfusionMatrix::Create(int64_t num_classes) {
  if (num_classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("ConfusionMatrix needs num_classes >= 1, got ", num_classes));
  }
  return std::shared_ptr<ConfusionMatrix>(new ConfusionMatrix(num_classes));
}

ConfusionMatrix::ConfusionMatrix(int64_t num_classes) : Metric("ConfusionMatrix"), num_classes_(num_classes) {
  AddShardedState("matrix", {num_classes, num_classes}, at::kLong, /*chunk_dim=*/0);
}

std::string ConfusionMatrix::Describe() const { return absl::StrCat("classes=", num_classes_); }

absl::Status ConfusionMatrix::Update(const at::Tensor& preds, const at::Tensor& target) {
  SL_RETURN_IF_ERROR(CheckUsable());
  if (absl::Status s = CheckClassIds(target, num_classes_, "target"); !s.ok()) return Reject(s);
  at::Tensor predicted;
  if (preds.defined() && preds.dim() == 2) {
    if (absl::Status s = CheckScores(preds, target.size(0), num_classes_); !s.ok()) return Reject(s);
    predicted = preds.argmax(1);
  } else {
    if (absl::Status s = CheckClassIds(preds, num_classes_, "preds"); !s.ok()) return Reject(s);
    if (preds.size(0) != target.size(0)) {
      return Reject(absl::InvalidArgumentError(
          absl::StrCat("preds hold ", preds.size(0), " samples but target holds ", target.size(0))));
    }
    predicted = preds;
  }
  if (target.numel() == 0) return absl::OkStatus();
  AccumulateSharded("matrix", at::stack({target, predicted}, 1), at::ones({target.size(0)}, at::kLong));
  return absl::OkStatus();
}

absl::StatusOr<sharded::StateValue> ConfusionMatrix::ComputeValue() {
  sharded::ShardedTensor* matrix = Sharded("matrix");
  if (matrix == nullptr) return absl::FailedPreconditionError("metric 'ConfusionMatrix' is not bound");
  return sharded::StateValue(*matrix);
}

absl::StatusOr<double> ConfusionMatrix::ComputeScalar() {
  SL_RETURN_IF_ERROR(Sync());
  sharded::ShardedTensor* matrix = Sharded("matrix");
  // This rank's part of (trace, total), then the sum over ranks.
  std::vector<at::Tensor> sums = {at::zeros({2}, at::kLong)};
  for (const auto& shard : matrix->local_shards()) {
    const int64_t r0 = shard.metadata.offsets[0], c0 = shard.metadata.offsets[1];
    sums[0][1] += shard.tensor.sum();
    // Diagonal elements (i, i) with i in both the shard's rows and columns.
    const int64_t lo = std::max(r0, c0);
    const int64_t hi = std::min(r0 + shard.metadata.sizes[0], c0 + shard.metadata.sizes[1]);
    if (hi > lo) sums[0][0] += shard.tensor.narrow(0, lo - r0, hi - lo).narrow(1, lo - c0, hi - lo).diagonal().sum();
  }
  if (matrix->process_group()->getSize() > 1) {
    SL_RETURN_IF_ERROR(sharded::RunCollective(*matrix->process_group(), "allreduce of the matrix trace",
                                              [&] { return matrix->process_group()->allreduce(sums); }));
  }
  const int64_t total = sums[0][1].item<int64_t>();
  if (total == 0) return absl::FailedPreconditionError("metric 'ConfusionMatrix': no rank has seen any sample");
  return static_cast<double>(sums[0][0].item<int64_t>()) / static_cast<double>(total);
}

}  // namespace shardlight::lightning::metrics
