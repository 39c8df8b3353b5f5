// MetricsCallback: computes metrics every `every` steps and after the last
// step, and prints them on rank 0 beside the progress output:
//   step 5/10  metrics  accuracy 0.812500  mse 0.042113
// Compute is collective, so every rank runs this callback (the Trainer calls
// callbacks on every rank). A metric that has no value yet (no rank saw data:
// FailedPrecondition) prints "-"; any other error -- an inconsistent update on
// some rank -- stops training on every rank with that rank's error.
#ifndef SHARDLIGHT_LIGHTNING_METRICS_METRICS_CALLBACK_H_
#define SHARDLIGHT_LIGHTNING_METRICS_METRICS_CALLBACK_H_

#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "lightning/callback.h"
#include "lightning/metrics/metric.h"

namespace shardlight::lightning::metrics {

class MetricsCallback : public Callback {
 public:
  using NamedMetrics = std::vector<std::pair<std::string, std::shared_ptr<Metric>>>;
  // `out` may be null (compute and record, print nothing).
  MetricsCallback(NamedMetrics metrics, std::ostream* out, int64_t every);

  absl::Status OnStepEnd(const TrainState& state, int64_t step, double loss) override;

  // The values of the latest computation (absent: no value yet), and the
  // steps at which metrics were computed.
  const std::map<std::string, double>& last() const { return last_; }
  const std::vector<int64_t>& computed_at() const { return computed_at_; }

 private:
  NamedMetrics metrics_;
  std::ostream* out_;
  int64_t every_;
  std::map<std::string, double> last_;
  std::vector<int64_t> computed_at_;
};

}  // namespace shardlight::lightning::metrics

#endif  // SHARDLIGHT_LIGHTNING_METRICS_METRICS_CALLBACK_H_
