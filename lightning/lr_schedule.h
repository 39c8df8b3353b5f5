// LrSchedule: a step-based learning-rate schedule, as Lightning runs a
// scheduler with interval="step": the optimizer's step t (0-based) uses
// lr = base_lr * factor(t), torch.optim.lr_scheduler.LambdaLR's rule (its
// construction applies factor(0); each scheduler.step() after an optimizer
// step applies the next). base_lr is the optimizer's lr when the Trainer
// binds the schedule.
//
// Kinds and their factor(t):
//   kConstant      1
//   kWarmupCosine  t < W: s + (1 - s) * t / W  (torch's LinearLR, start_factor
//                  s = warmup_start_factor; s = 0 starts at lr 0 as
//                  transformers' get_cosine_schedule_with_warmup does);
//                  t >= W: m + (1 - m) * (1 + cos(pi * p)) / 2 with
//                  p = min(1, (t - W) / (T - W)) (CosineAnnealingLR's closed
//                  form, eta_min = m * base_lr, held at m past T), W =
//                  warmup_steps, T = total_steps (0: the Trainer's max_steps),
//                  m = min_lr_factor
//   kStepDecay     gamma ^ floor(t / step_size)  (StepLR)
//
// State (checkpointed as values "<prefix>last_step", an int, and
// "<prefix>base_lr", a float; the Trainer uses "lr_scheduler."; earlier
// releases saved int64 [1] and float64 [1] tensors, which still load): the
// number of schedule steps taken and the base rate, so a resume -- on any
// world size -- continues with exactly the same learning rates.
#ifndef SHARDLIGHT_LIGHTNING_LR_SCHEDULE_H_
#define SHARDLIGHT_LIGHTNING_LR_SCHEDULE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lightning/optimizer.h"
#include "sharded/state_dict.h"

namespace shardlight::lightning {

struct LrScheduleOptions {
  enum class Kind { kConstant, kWarmupCosine, kStepDecay };
  Kind kind = Kind::kConstant;
  int64_t warmup_steps = 0;         // kWarmupCosine
  double warmup_start_factor = 0;   // kWarmupCosine, in [0, 1]
  int64_t total_steps = 0;          // kWarmupCosine; 0: the Trainer's max_steps
  double min_lr_factor = 0;         // kWarmupCosine, in [0, 1]
  int64_t step_size = 1;            // kStepDecay, >= 1
  double gamma = 0.1;               // kStepDecay, > 0
};

class LrSchedule {
 public:
  // InvalidArgument naming the option: a negative warmup_steps or
  // total_steps, warmup_steps > total_steps (when set), a factor outside
  // [0, 1], step_size < 1, gamma <= 0.
  static absl::StatusOr<std::unique_ptr<LrSchedule>> Create(LrScheduleOptions options);

  // Binds to `optimizer` for a run of `max_steps` optimizer steps: base_lr is
  // its lr now, and its lr becomes base_lr * factor(last_step).
  // InvalidArgument when warmup_steps exceeds the cosine's end (total_steps,
  // or max_steps when that is 0): "warmup_steps W exceeds max_steps M".
  absl::Status Bind(Optimizer& optimizer, int64_t max_steps);
  // After the optimizer's step: last_step + 1, and the optimizer's lr for it.
  absl::Status Step(Optimizer& optimizer);
  // Sets the optimizer's lr from the state (after a resume loaded it).
  absl::Status Apply(Optimizer& optimizer) const;

  double Factor(int64_t step) const;
  int64_t last_step() const { return last_step_; }
  // Resumes the schedule at `step` (a checkpoint without its state).
  void set_last_step(int64_t step) { last_step_ = step; }
  double base_lr() const { return base_lr_; }
  const LrScheduleOptions& options() const { return options_; }
  // Adds the state, as values (a snapshot: a later Step changes none).
  absl::Status AddStateTo(sharded::StateDict& dict, const std::string& prefix) const;
  // Restores the state from what AddStateTo saved (an int and a float, or
  // as earlier releases saved them, an int and a float read from tensors).
  // InvalidArgument naming the entry: a last_step that is no int >= 0, a
  // base_lr that is no finite number >= 0. Apply sets the optimizer's rate.
  absl::Status RestoreState(const sharded::PlainValue& last_step, const sharded::PlainValue& base_lr);

 private:
  explicit LrSchedule(LrScheduleOptions options);
  LrScheduleOptions options_;
  int64_t total_steps_ = 0;  // the cosine's end, once bound
  int64_t last_step_ = 0;
  double base_lr_ = 0;
};

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_LR_SCHEDULE_H_
