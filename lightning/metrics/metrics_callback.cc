#include "lightning/metrics/metrics_callback.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardlight::lightning::metrics {

MetricsCallback::MetricsCallback(NamedMetrics metrics, std::ostream* out, int64_t every)
    : metrics_(std::move(metrics)), out_(out), every_(every < 1 ? 1 : every) {}

absl::Status MetricsCallback::OnStepEnd(const TrainState& state, int64_t step, double loss) {
  if (step % every_ != 0 && step != state.max_steps) return absl::OkStatus();
  std::string line = absl::StrCat("step ", step, "/", state.max_steps, "  metrics");
  last_.clear();
  for (const auto& [name, metric] : metrics_) {
    absl::StatusOr<double> value = metric->ComputeScalar();
    if (value.ok()) {
      last_[name] = *value;
      absl::StrAppend(&line, "  ", name, " ", absl::StrFormat("%.6f", *value));
    } else if (absl::IsFailedPrecondition(value.status())) {
      absl::StrAppend(&line, "  ", name, " -");
    } else {
      return absl::Status(value.status().code(),
                          absl::StrCat("metric \"", name, "\" at step ", step, ": ", value.status().message()));
    }
  }
  computed_at_.push_back(step);
  if (out_ != nullptr && state.rank == 0) *out_ << line << "\n" << std::flush;
  return absl::OkStatus();
}

}  // namespace shardlight::lightning::metrics
