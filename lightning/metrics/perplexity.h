// Perplexity: exp of the mean per-token cross-entropy (natural log) over
// every token seen on every rank of the metric's group -- a MeanMetric of the
// token losses, exponentiated when computed, so uneven ranks weigh by their
// token counts. For a tensor-parallel model bind it to the data-parallel
// group: the TP ranks of one group see the same tokens.
#ifndef SHARDLIGHT_LIGHTNING_METRICS_PERPLEXITY_H_
#define SHARDLIGHT_LIGHTNING_METRICS_PERPLEXITY_H_

#include "lightning/metrics/mean_metric.h"

namespace shardlight::lightning::metrics {

class Perplexity : public MeanMetric {
 public:
  Perplexity();
  // Local. `token_losses`: per-token cross-entropies in nats, any shape.
  absl::Status Update(const at::Tensor& token_losses) { return MeanMetric::Update(token_losses); }

 protected:
  // A double scalar exp(mean); FailedPrecondition when no token was seen.
  absl::StatusOr<sharded::StateValue> ComputeValue() override;
};

}  // namespace shardlight::lightning::metrics

#endif  // SHARDLIGHT_LIGHTNING_METRICS_PERPLEXITY_H_
