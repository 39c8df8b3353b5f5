// PhaseTimes: where one rank's training steps spend their wall time -- the
// FSDP all-gathers (issued and waited for, with the copy into the full
// parameters), the reduce-scatters (with the copies into and out of the flat
// buffers), the optimizer (gradient clipping, the step, the LR schedule) --
// and the rest of the step, which is the forward and backward compute. A
// caller hands one to TrainerOptions::phase_times; the Trainer times each
// step and the optimizer, the strategy (FsdpStrategy) its collectives.
//
// Only time inside a step counts (a validation's gathers do not), and phase
// scopes do not nest: a scope opened inside another phase's counts nothing,
// so the phases never sum to more than the steps. One PhaseTimes belongs to
// one rank and is used on that rank's thread only (not thread-safe). A null
// PhaseTimes* makes every scope a no-op: off costs one pointer test.
#ifndef SHARDLIGHT_LIGHTNING_PHASE_TIMES_H_
#define SHARDLIGHT_LIGHTNING_PHASE_TIMES_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <string>

namespace shardlight::lightning {

enum class Phase { kAllGather, kReduceScatter, kOptimizer };
inline constexpr int kPhaseCount = 3;

// "all_gather", "reduce_scatter", "optimizer".
const char* PhaseName(Phase phase);

class PhaseTimes {
 public:
  // Times one step (outermost only) or one phase while it lives; `times`
  // null: nothing.
  class StepScope {
   public:
    explicit StepScope(PhaseTimes* times);
    ~StepScope();
    StepScope(const StepScope&) = delete;
    StepScope& operator=(const StepScope&) = delete;

   private:
    PhaseTimes* times_;
    std::chrono::steady_clock::time_point start_;
  };
  class Scope {
   public:
    Scope(PhaseTimes* times, Phase phase);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    PhaseTimes* times_;  // null when this scope counts nothing
    Phase phase_;
    std::chrono::steady_clock::time_point start_;
  };

  int64_t steps() const { return steps_; }
  double step_seconds() const { return step_seconds_; }
  double seconds(Phase phase) const { return seconds_[static_cast<int>(phase)]; }
  // The steps' time outside the phases: forward, backward, the loss.
  double compute_seconds() const;
  void Reset() { *this = PhaseTimes(); }

  // "steps N step_s S all_gather_s A compute_s C reduce_scatter_s R
  // optimizer_s O" -- seconds per step (0 without a step).
  std::string PerStepLine() const;

 private:
  std::array<double, kPhaseCount> seconds_{};
  double step_seconds_ = 0;
  int64_t steps_ = 0;
  int step_depth_ = 0;
  bool in_phase_ = false;
};

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_PHASE_TIMES_H_
