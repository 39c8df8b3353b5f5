#include "lightning/loggers/progress_bar.h"

#include <unistd.h>

#include <cmath>
#include <iostream>
#include <string>

#include "absl/strings/str_format.h"

namespace shardlight::lightning::loggers {

std::string FormatEta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

ProgressBar::ProgressBar(std::ostream& out, int64_t every, Mode mode)
    : out_(out), every_(every < 1 ? 1 : every), bar_(mode == Mode::kBar) {
  if (mode == Mode::kAuto) {
    bar_ = (&out == &std::cout && ::isatty(STDOUT_FILENO)) || (&out == &std::cerr && ::isatty(STDERR_FILENO));
  }
}

absl::Status ProgressBar::OnTrainStart(const TrainState& state) {
  start_ = std::chrono::steady_clock::now();
  start_step_ = state.start_step;
  return absl::OkStatus();
}

absl::Status ProgressBar::OnStepEnd(const TrainState& state, int64_t step, double loss) {
  if (state.rank != 0) return absl::OkStatus();
  const bool last = step >= state.max_steps;
  if (!bar_ && step % every_ != 0 && !last) return absl::OkStatus();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = seconds > 0 ? (step - start_step_) / seconds : 0;
  const double eta = rate > 0 ? (state.max_steps - step) / rate : -1;
  if (bar_) {
    constexpr int kWidth = 20;
    const int filled = state.max_steps > 0 ? static_cast<int>(kWidth * step / state.max_steps) : kWidth;
    out_ << "\r[" << std::string(filled, '#') << std::string(kWidth - filled, '.') << "]  "
         << absl::StrFormat("%d/%d  loss %.6f  %.1f steps/s  ETA %s", step, state.max_steps, loss, rate,
                            FormatEta(eta))
         << (last ? "\n" : "") << std::flush;
  } else {
    out_ << absl::StrFormat("step %d/%d  loss %.6f  %.1f steps/s  ETA %s\n", step, state.max_steps, loss, rate,
                            FormatEta(eta))
         << std::flush;
  }
  return absl::OkStatus();
}

}  // namespace shardlight::lightning::loggers
