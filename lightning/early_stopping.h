// EarlyStopping: Lightning's EarlyStopping(monitor, patience, min_delta,
// mode) as a Callback. After each validation run it compares the monitored
// metric with the best so far: an improvement is a value below best -
// min_delta (mode "min") or above best + min_delta ("max"); after `patience`
// validation runs in a row without one, ShouldStop() is true and the Trainer
// stops after that step on every rank (the metrics are reduced, so every
// rank decides alike; the Trainer agrees on it too).
//
// Errors: Create: InvalidArgument for an empty monitor, a mode other than
// "min"/"max", patience < 1 or a negative min_delta. A monitor no
// ValidationStep logs fails every rank in the Trainer's sanity pass before
// training (MonitoredKeys), naming it and what is logged.
#ifndef SHARDLIGHT_LIGHTNING_EARLY_STOPPING_H_
#define SHARDLIGHT_LIGHTNING_EARLY_STOPPING_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lightning/callback.h"

namespace shardlight::lightning {

struct EarlyStoppingOptions {
  std::string monitor;
  int64_t patience = 3;
  double min_delta = 0;
  std::string mode = "min";
};

class EarlyStopping : public Callback {
 public:
  static absl::StatusOr<std::shared_ptr<EarlyStopping>> Create(EarlyStoppingOptions options);
  absl::Status OnValidationEnd(const TrainState&, int64_t step, const std::map<std::string, double>& metrics) override;
  std::vector<std::string> MonitoredKeys() const override { return {options_.monitor}; }
  bool ShouldStop() const override { return wait_ >= options_.patience; }
  // The step whose validation stopped the run (0: none yet).
  int64_t stopped_step() const { return stopped_step_; }

 private:
  explicit EarlyStopping(EarlyStoppingOptions options) : options_(std::move(options)) {}
  EarlyStoppingOptions options_;
  std::optional<double> best_;
  int64_t wait_ = 0;
  int64_t stopped_step_ = 0;
};

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_EARLY_STOPPING_H_
