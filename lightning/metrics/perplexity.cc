#include "lightning/metrics/perplexity.h"

#include "sharded/status_macros.h"

namespace shardlight::lightning::metrics {

Perplexity::Perplexity() = default;

absl::StatusOr<sharded::StateValue> Perplexity::ComputeValue() {
  SL_ASSIGN_OR_RETURN(sharded::StateValue mean, MeanMetric::ComputeValue());
  return sharded::StateValue(std::get<at::Tensor>(mean).exp());
}

}  // namespace shardlight::lightning::metrics
