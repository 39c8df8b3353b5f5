#include "lightning/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {

LrSchedule::LrSchedule(LrScheduleOptions options)
    : options_(options) {}

absl::StatusOr<std::unique_ptr<LrSchedule>> LrSchedule::Create(LrScheduleOptions options) {
  const auto bad = [](const std::string& what) { return absl::InvalidArgumentError("LR schedule: " + what); };
  if (options.warmup_steps < 0) return bad(absl::StrCat("warmup_steps is ", options.warmup_steps, "; want >= 0"));
  if (options.total_steps < 0) return bad(absl::StrCat("total_steps is ", options.total_steps, "; want >= 0"));
  if (options.total_steps > 0 && options.warmup_steps > options.total_steps) {
    return bad(absl::StrCat("warmup_steps ", options.warmup_steps, " exceeds total_steps ", options.total_steps));
  }
  if (!(options.warmup_start_factor >= 0 && options.warmup_start_factor <= 1)) {
    return bad(absl::StrCat("warmup_start_factor is ", options.warmup_start_factor, "; want [0, 1]"));
  }
  if (!(options.min_lr_factor >= 0 && options.min_lr_factor <= 1)) {
    return bad(absl::StrCat("min_lr_factor is ", options.min_lr_factor, "; want [0, 1]"));
  }
  if (options.step_size < 1) return bad(absl::StrCat("step_size is ", options.step_size, "; want >= 1"));
  if (!(options.gamma > 0) || !std::isfinite(options.gamma)) {
    return bad(absl::StrCat("gamma is ", options.gamma, "; want > 0"));
  }
  return std::unique_ptr<LrSchedule>(new LrSchedule(options));
}

absl::Status LrSchedule::Bind(Optimizer& optimizer, int64_t max_steps) {
  total_steps_ = options_.total_steps > 0 ? options_.total_steps : max_steps;
  if (options_.kind == LrScheduleOptions::Kind::kWarmupCosine && options_.warmup_steps > total_steps_) {
    return absl::InvalidArgumentError(absl::StrCat("LR schedule: warmup_steps ", options_.warmup_steps,
                                                   " exceeds max_steps ", total_steps_,
                                                   options_.total_steps > 0 ? " (total_steps)" : ""));
  }
  base_lr_ = optimizer.lr();
  return Apply(optimizer);
}

double LrSchedule::Factor(int64_t t) const {
  switch (options_.kind) {
    case LrScheduleOptions::Kind::kConstant:
      return 1.0;
    case LrScheduleOptions::Kind::kStepDecay:
      return std::pow(options_.gamma, static_cast<double>(t / options_.step_size));
    case LrScheduleOptions::Kind::kWarmupCosine: {
      const int64_t w = options_.warmup_steps;
      if (t < w) {
        const double s = options_.warmup_start_factor;
        return s + (1 - s) * static_cast<double>(t) / static_cast<double>(w);
      }
      const int64_t span = total_steps_ - w;
      const double progress = span > 0 ? std::min(1.0, static_cast<double>(t - w) / static_cast<double>(span)) : 1.0;
      const double m = options_.min_lr_factor;
      return m + (1 - m) * (1 + std::cos(M_PI * progress)) / 2;
    }
  }
  return 1.0;
}

absl::Status LrSchedule::Apply(Optimizer& optimizer) const {
  return optimizer.set_lr(base_lr() * Factor(last_step()));
}

absl::Status LrSchedule::Step(Optimizer& optimizer) {
  ++last_step_;
  return Apply(optimizer);
}

absl::Status LrSchedule::AddStateTo(sharded::StateDict& dict, const std::string& prefix) const {
  SL_RETURN_IF_ERROR(dict.InsertValue(prefix + "last_step", sharded::PlainValue::Int(last_step_)));
  return dict.InsertValue(prefix + "base_lr", sharded::PlainValue::Float(base_lr_));
}

absl::Status LrSchedule::RestoreState(const sharded::PlainValue& last_step, const sharded::PlainValue& base_lr) {
  using Kind = sharded::PlainValue::Kind;
  if (last_step.kind() != Kind::kInt || last_step.integer() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("LR schedule: last_step is ", last_step.Repr(), "; want an int >= 0"));
  }
  const double lr = base_lr.kind() == Kind::kFloat ? base_lr.real()
                    : base_lr.kind() == Kind::kInt ? static_cast<double>(base_lr.integer())
                                                   : -1;
  if (!(lr >= 0) || !std::isfinite(lr)) {
    return absl::InvalidArgumentError(absl::StrCat("LR schedule: base_lr is ", base_lr.Repr(), "; want a finite number >= 0"));
  }
  last_step_ = last_step.integer();
  base_lr_ = lr;
  return absl::OkStatus();
}

}  // namespace shardlight::lightning
