// Callbacks: the Trainer's extension points. A non-OK status from any hook
// stops training on that rank with that error (fault plans use this).
//
// Hooks, in order: on_train_start (after setup and any resume), on_step_end
// (after each optimizer step), on_save_started (an asynchronous save's
// snapshot is taken; training goes on while it is written), on_save_checkpoint
// (after a checkpoint is committed; for an asynchronous save, at the end of
// the first step during which every rank's save had ended -- or at the next
// save or the end of Fit, whichever comes first),
// on_load_checkpoint (after a resume loaded one), on_validation_end (after
// each validation run, with its metrics; then ShouldStop is asked).
#ifndef SHARDLIGHT_LIGHTNING_CALLBACK_H_
#define SHARDLIGHT_LIGHTNING_CALLBACK_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace shardlight::lightning {

struct TrainState {
  int rank = 0;
  int world_size = 1;
  int64_t start_step = 0;  // > 0 after a resume
  int64_t max_steps = 0;
};

class Callback {
 public:
  virtual ~Callback() = default;
  virtual absl::Status OnTrainStart(const TrainState&) { return absl::OkStatus(); }
  // `step` counts completed steps (1 after the first); `loss` is the global loss.
  virtual absl::Status OnStepEnd(const TrainState&, int64_t step, double loss) { return absl::OkStatus(); }
  virtual absl::Status OnSaveStarted(const TrainState&, int64_t step, const std::string& dir) {
    return absl::OkStatus();
  }
  virtual absl::Status OnSaveCheckpoint(const TrainState&, int64_t step, const std::string& dir) {
    return absl::OkStatus();
  }
  virtual absl::Status OnLoadCheckpoint(const TrainState&, int64_t step, const std::string& dir) {
    return absl::OkStatus();
  }
  // After a validation run (lightning/validation_loop.h) following step
  // `step`: its metrics, reduced across ranks (the same on every rank).
  virtual absl::Status OnValidationEnd(const TrainState&, int64_t step, const std::map<std::string, double>& metrics) {
    return absl::OkStatus();
  }
  // The validation keys this callback reads: the Trainer's sanity pass fails
  // every rank before training when one is not logged.
  virtual std::vector<std::string> MonitoredKeys() const { return {}; }
  // Asked after OnValidationEnd: true stops training after this step, on
  // every rank (it must be a function of the metrics, which every rank
  // shares).
  virtual bool ShouldStop() const { return false; }
};

// Prints "step 5/10  loss 0.123456  12.3 steps/s" every `every` steps, on rank 0.
class ProgressCallback : public Callback {
 public:
  ProgressCallback(std::ostream& out, int64_t every) : out_(out), every_(every < 1 ? 1 : every) {}
  absl::Status OnTrainStart(const TrainState& state) override;
  absl::Status OnStepEnd(const TrainState& state, int64_t step, double loss) override;

 private:
  std::ostream& out_;
  int64_t every_;
  std::chrono::steady_clock::time_point last_time_;
  int64_t last_step_ = 0;
};

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_CALLBACK_H_
