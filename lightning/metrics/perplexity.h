// Perplexity: exp of the mean per-token cross-entropy (natural log) over
// every token seen on every rank of the metric's group -- a mean of the token
// losses, exponentiated when computed, so uneven ranks weigh by their token
// counts. For a tensor-parallel model bind it to the data-parallel group: the
// TP ranks of one group see the same tokens.
//
// As torchmetrics' Perplexity(ignore_index): tokens whose target is
// `ignore_index` count for nothing (neither loss nor token). NaNs are not
// dropped ("disable", as torchmetrics' Perplexity, which has no
// nan_strategy): a NaN logit or loss makes the value NaN.
#ifndef SHARDLIGHT_LIGHTNING_METRICS_PERPLEXITY_H_
#define SHARDLIGHT_LIGHTNING_METRICS_PERPLEXITY_H_

#include <cstdint>
#include <optional>
#include <string>

#include "lightning/metrics/mean_metric.h"

namespace shardlight::lightning::metrics {

class Perplexity : public MeanMetric {
 public:
  explicit Perplexity(std::optional<int64_t> ignore_index = std::nullopt);

  // Local. `token_losses`: per-token cross-entropies in nats, any shape;
  // every element counts (no target, so nothing is ignored).
  absl::Status Update(const at::Tensor& token_losses);
  // Local, torchmetrics' form. Either `preds` are logits [..., vocab]
  // (floating, one more dimension than `target`; softmax taken internally)
  // or per-token losses of `target`'s shape (e.g. cross_entropy with
  // reduction "none"). `target`: int64 token ids in [0, vocab), or
  // ignore_index. InvalidArgument on other shapes, dtypes or ids.
  absl::Status Update(const at::Tensor& preds, const at::Tensor& target);

  const std::optional<int64_t>& ignore_index() const { return ignore_index_; }

 protected:
  // A double scalar exp(mean); FailedPrecondition when no token was seen.
  absl::StatusOr<sharded::StateValue> ComputeValue() override;
  std::string Describe() const override;

 private:
  std::optional<int64_t> ignore_index_;
};

}  // namespace shardlight::lightning::metrics

#endif  // SHARDLIGHT_LIGHTNING_METRICS_PERPLEXITY_H_
