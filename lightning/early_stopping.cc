#include "lightning/early_stopping.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace shardlight::lightning {

absl::StatusOr<std::shared_ptr<EarlyStopping>> EarlyStopping::Create(EarlyStoppingOptions options) {
  const auto bad = [](const std::string& what) { return absl::InvalidArgumentError("EarlyStopping: " + what); };
  if (options.monitor.empty()) return bad("monitor is empty; name a key ValidationStep logs");
  if (options.mode != "min" && options.mode != "max") return bad("mode is '" + options.mode + "'; want min or max");
  if (options.patience < 1) return bad(absl::StrCat("patience is ", options.patience, "; want >= 1"));
  if (!(options.min_delta >= 0)) return bad(absl::StrCat("min_delta is ", options.min_delta, "; want >= 0"));
  return std::shared_ptr<EarlyStopping>(new EarlyStopping(std::move(options)));
}

absl::Status EarlyStopping::OnValidationEnd(const TrainState&, int64_t step,
                                            const std::map<std::string, double>& metrics) {
  const auto it = metrics.find(options_.monitor);
  if (it == metrics.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("EarlyStopping: monitor '", options_.monitor, "' is not logged by ValidationStep"));
  }
  const double value = it->second;
  const bool improved = !best_.has_value() ||
                        (options_.mode == "min" ? value < *best_ - options_.min_delta
                                                : value > *best_ + options_.min_delta);
  if (improved && std::isfinite(value)) {
    best_ = value;
    wait_ = 0;
  } else {
    ++wait_;
  }
  if (ShouldStop() && stopped_step_ == 0) stopped_step_ = step;
  return absl::OkStatus();
}

}  // namespace shardlight::lightning
