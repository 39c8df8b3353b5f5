#include "lightning/phase_times.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace shardlight::lightning {
namespace {

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kAllGather:
      return "all_gather";
    case Phase::kReduceScatter:
      return "reduce_scatter";
    case Phase::kOptimizer:
      return "optimizer";
  }
  return "unknown";
}

PhaseTimes::StepScope::StepScope(PhaseTimes* times) : times_(times) {
  if (times_ == nullptr) return;
  if (times_->step_depth_++ == 0) start_ = std::chrono::steady_clock::now();
}

PhaseTimes::StepScope::~StepScope() {
  if (times_ == nullptr || --times_->step_depth_ > 0) return;
  times_->step_seconds_ += Since(start_);
  ++times_->steps_;
}

PhaseTimes::Scope::Scope(PhaseTimes* times, Phase phase) : times_(times), phase_(phase) {
  // Outside a step, or inside another phase: counts nothing.
  if (times_ == nullptr || times_->step_depth_ == 0 || times_->in_phase_) {
    times_ = nullptr;
    return;
  }
  times_->in_phase_ = true;
  start_ = std::chrono::steady_clock::now();
}

PhaseTimes::Scope::~Scope() {
  if (times_ == nullptr) return;
  times_->seconds_[static_cast<int>(phase_)] += Since(start_);
  times_->in_phase_ = false;
}

double PhaseTimes::compute_seconds() const {
  double phases = 0;
  for (double s : seconds_) phases += s;
  return std::max(0.0, step_seconds_ - phases);
}

std::string PhaseTimes::PerStepLine() const {
  const double n = steps_ > 0 ? static_cast<double>(steps_) : 1.0;
  const double per = steps_ > 0 ? 1.0 / n : 0.0;
  return absl::StrFormat("steps %d step_s %.6f all_gather_s %.6f compute_s %.6f reduce_scatter_s %.6f optimizer_s %.6f",
                         steps_, step_seconds_ * per, seconds(Phase::kAllGather) * per, compute_seconds() * per,
                         seconds(Phase::kReduceScatter) * per, seconds(Phase::kOptimizer) * per);
}

}  // namespace shardlight::lightning
