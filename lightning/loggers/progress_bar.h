// ProgressBar: Lightning's progress bar for Trainer.Fit, on rank 0.
// On a terminal, one line redrawn in place ("\r") after every step:
//   [#######.............]  35/100  loss 0.123456  12.3 steps/s  ETA 0:05
// and a newline after the last step. Not on a terminal (a file, a pipe, CI),
// plain lines every `every` steps and after the last:
//   step 35/100  loss 0.123456  12.3 steps/s  ETA 0:05
// steps/s is the mean since training (or the resume) started; ETA is the
// steps left at that rate.
#ifndef SHARDLIGHT_LIGHTNING_LOGGERS_PROGRESS_BAR_H_
#define SHARDLIGHT_LIGHTNING_LOGGERS_PROGRESS_BAR_H_

#include <chrono>
#include <cstdio>
#include <ostream>
#include <string>

#include "lightning/callback.h"

namespace shardlight::lightning::loggers {

class ProgressBar : public Callback {
 public:
  enum class Mode { kAuto, kBar, kLines };
  // kAuto: a bar when `out` is std::cout and stdout is a terminal (isatty),
  // or std::cerr and stderr is; lines otherwise.
  explicit ProgressBar(std::ostream& out, int64_t every = 10, Mode mode = Mode::kAuto);

  absl::Status OnTrainStart(const TrainState& state) override;
  absl::Status OnStepEnd(const TrainState& state, int64_t step, double loss) override;

  bool bar() const { return bar_; }

 private:
  std::ostream& out_;
  int64_t every_;
  bool bar_;
  std::chrono::steady_clock::time_point start_;
  int64_t start_step_ = 0;
};

// "0:05", "1:02:03"; "?" when unknown.
std::string FormatEta(double seconds);

}  // namespace shardlight::lightning::loggers

#endif  // SHARDLIGHT_LIGHTNING_LOGGERS_PROGRESS_BAR_H_
