#include "lightning/callback.h"

#include <iomanip>

namespace shardlight::lightning {

absl::Status ProgressCallback::OnTrainStart(const TrainState& state) {
  last_time_ = std::chrono::steady_clock::now();
  last_step_ = state.start_step;
  return absl::OkStatus();
}

absl::Status ProgressCallback::OnStepEnd(const TrainState& state, int64_t step, double loss) {
  if (state.rank != 0 || (step % every_ != 0 && step != state.max_steps)) return absl::OkStatus();
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - last_time_).count();
  const double rate = seconds > 0 ? static_cast<double>(step - last_step_) / seconds : 0.0;
  out_ << "step " << step << "/" << state.max_steps << "  loss " << std::fixed << std::setprecision(6) << loss
       << "  " << std::setprecision(1) << rate << " steps/s\n";
  last_time_ = now;
  last_step_ = step;
  return absl::OkStatus();
}

}  // namespace shardlight::lightning
