// NanStrategy: what an aggregating metric (MeanMetric, CatMetric) does with
// NaN values -- torchmetrics' `nan_strategy`, with its names and semantics:
//   "warn" (the default, as torchmetrics'): NaN values (and, for MeanMetric,
//       values whose weight is NaN) are dropped; the first update that drops
//       some prints one warning line to stderr on the rank that saw them
//       (once per metric object).
//   "ignore": dropped silently.
//   "error": the update is rejected (InvalidArgument, the metric poisoned
//       until Reset: every rank's next Compute fails with it).
//   "disable": no check; a NaN flows into the value (a mean becomes NaN).
//       Unlike torchmetrics 1.9, which also drops the weights given to
//       MeanMetric.update under "disable", shardlight keeps them.
//   a float v: each NaN value (or value with a NaN weight) becomes v with
//       weight 1.
#ifndef SHARDLIGHT_LIGHTNING_METRICS_NAN_STRATEGY_H_
#define SHARDLIGHT_LIGHTNING_METRICS_NAN_STRATEGY_H_

#include <ATen/ATen.h>

#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardlight::lightning::metrics {

class NanStrategy {
 public:
  enum class Kind { kWarn, kIgnore, kError, kDisable, kReplace };

  NanStrategy() = default;  // "warn"
  static NanStrategy Warn() { return NanStrategy(Kind::kWarn, 0); }
  static NanStrategy Ignore() { return NanStrategy(Kind::kIgnore, 0); }
  static NanStrategy Error() { return NanStrategy(Kind::kError, 0); }
  static NanStrategy Disable() { return NanStrategy(Kind::kDisable, 0); }
  static NanStrategy Replace(double value) { return NanStrategy(Kind::kReplace, value); }
  // "warn", "ignore", "error", "disable" or a finite number ("0", "-1.5");
  // InvalidArgument naming `text` otherwise.
  static absl::StatusOr<NanStrategy> Parse(std::string_view text);

  Kind kind() const { return kind_; }
  double value() const { return value_; }
  // The torchmetrics name ("warn", ...) or the replacement value.
  std::string Name() const;

  // Applies the strategy to `values` and `weights` (same shape; weights
  // double) for metric `metric`. Returns the kept values and weights
  // (flattened when NaNs were dropped); InvalidArgument under "error" when
  // there is a NaN. Under "warn", prints the warning unless `*warned`, then
  // sets it.
  absl::StatusOr<std::pair<at::Tensor, at::Tensor>> Apply(const at::Tensor& values, const at::Tensor& weights,
                                                          const std::string& metric, bool* warned) const;

 private:
  NanStrategy(Kind kind, double value) : kind_(kind), value_(value) {}
  Kind kind_ = Kind::kWarn;
  double value_ = 0;
};

}  // namespace shardlight::lightning::metrics

#endif  // SHARDLIGHT_LIGHTNING_METRICS_NAN_STRATEGY_H_
