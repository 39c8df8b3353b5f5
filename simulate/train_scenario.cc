#include "simulate/train_scenario.h"

#include <chrono>
#include <iomanip>

#include "absl/strings/str_cat.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"
#include "simulate/training_run.h"

namespace shardlight::simulate {
namespace {

int OtherWorldSize(int w) { return w > 2 ? w - 1 : w + 1; }

// Phase 1 trains steps 1..PhaseOneSteps(steps) and checkpoints; phase 2 the rest.
int64_t PhaseOneSteps(int64_t steps) { return std::max<int64_t>(1, steps / 2); }

}  // namespace

absl::Status CheckTrainScenario(const ScenarioOptions& options) {
  if (options.fault.empty()) return absl::OkStatus();
  SL_ASSIGN_OR_RETURN(const FaultPlan plan, ParseFaultPlan(options.fault));
  if (plan.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("fault names rank ", plan.rank, " but --world_size=", options.world_size));
  }
  const int64_t half = PhaseOneSteps(options.steps);
  if (plan.step > half) {
    return absl::InvalidArgumentError(absl::StrCat("fault step ", plan.step, " never comes: phase 1 runs steps 1..",
                                                   half, " of --steps=", options.steps, " (raise --steps)"));
  }
  return absl::OkStatus();
}

absl::Status RunTrainScenario(const ScenarioOptions& options, std::ostream& out) {
  TempDir temp;
  const std::string dir = options.checkpoint_dir.empty() ? temp.path() : options.checkpoint_dir;
  if (dir.empty()) return absl::InternalError("could not create a temporary checkpoint directory");
  const int64_t half = PhaseOneSteps(options.steps);
  const int64_t total = std::max<int64_t>(options.steps, half + 1);

  TrainingRunOptions first;
  first.world_size = options.world_size;
  first.max_steps = half;
  first.seed = options.seed;
  first.checkpoint_dir = dir;
  first.collective_timeout = options.collective_timeout;
  first.log_every = options.log_every;
  first.allow_different_run = options.allow_different_run;
  first.async_checkpoint = options.async_checkpoint;
  SL_RETURN_IF_ERROR(CheckTrainScenario(options));
  if (!options.fault.empty()) {
    SL_ASSIGN_OR_RETURN(first.fault, ParseFaultPlan(options.fault));
    first.checkpoint_every = 1;  // so a fault always has a checkpoint before it
  }
  out << "train: EmbeddingMlp (sharded table " << first.model.vocab << "x" << first.model.dim
      << " + dense MLP), seed " << options.seed << ", " << (options.async_checkpoint ? "background " : "")
      << "checkpoints in " << dir << "\n\n";
  auto saved = RunTraining(first);
  if (!saved.ok()) {
    out << "phase 1 on " << options.world_size << " ranks failed: " << saved.status() << "\n";
    if (!first.fault) return saved.status();
    out << "resuming from the last committed checkpoint with no fault...\n";
    first.fault.reset();
    saved = RunTraining(first);
    if (!saved.ok()) return saved.status();
  }
  if (const int64_t at = saved->ranks[0].start_step; at >= total) {
    out << "nothing to do: the checkpoint in " << dir << " is at step " << at << ", and --steps=" << options.steps
        << " ends at step " << total << " (raise --steps to train further)\n";
    return absl::OkStatus();
  }
  PrintRankTable(absl::StrCat("phase 1: ", options.world_size, " ranks, steps ", saved->ranks[0].start_step, "->",
                              saved->ranks[0].end_step, ", checkpoint saved"),
                 *saved, out);

  TrainingRunOptions second = first;
  second.fault.reset();
  second.world_size = OtherWorldSize(options.world_size);
  second.max_steps = total;
  second.checkpoint_every = 0;
  auto resumed = RunTraining(second);
  if (!resumed.ok()) return resumed.status();
  out << "\n";
  PrintRankTable(absl::StrCat("phase 2: reloaded on ", second.world_size, " ranks, steps ", half, "->", total),
                 *resumed, out);
  const bool equal = resumed->loaded_state && resumed->loaded_state->Equals(saved->final_state);
  out << "\nreloaded model equals saved: " << (equal ? "yes" : "NO")
      << " (dense parameters bit-equal, sharded table equal as a global tensor)\n";
  out << "final loss " << std::fixed << std::setprecision(6) << resumed->ranks[0].last_loss << " after " << total
      << " steps\n"
      << "final state digest " << resumed->final_state.Digest() << "\n";
  if (!equal) return absl::DataLossError("the reloaded model differs from the saved one");
  return absl::OkStatus();
}

absl::Status RunFaultsScenario(const ScenarioOptions& options, std::ostream& out) {
  const int w = std::max(2, options.world_size);
  const int64_t steps = std::max<int64_t>(options.steps, 4);
  const int victim = w - 1;
  const int64_t at = steps / 2;
  const std::vector<FaultPlan> plans = {
      {FaultKind::kCrash, victim, at, {}},
      {FaultKind::kSaveCrash, victim, at, {}},
      {FaultKind::kDelay, victim, at, std::chrono::milliseconds(300)},
      {FaultKind::kTimeout, victim, at, {}},
  };
  // Short timeouts keep the stalled-rank case quick.
  const std::chrono::milliseconds timeout = std::min(options.collective_timeout, std::chrono::milliseconds(2000));
  out << "faults: " << w << " ranks, " << steps << " steps, checkpoint every step, collective timeout "
      << timeout.count() << " ms\n\n"
      << std::left << std::setw(28) << "fault" << std::setw(10) << "seconds" << "outcome\n";
  int failures = 0;
  for (const FaultPlan& plan : plans) {
    TempDir dir;
    TrainingRunOptions run;
    run.world_size = w;
    run.max_steps = steps;
    run.seed = options.seed;
    run.checkpoint_dir = dir.path();
    run.checkpoint_every = 1;
    run.collective_timeout = timeout;
    run.fault = plan;
    const auto start = std::chrono::steady_clock::now();
    auto faulted = RunTraining(run);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::string outcome;
    bool ok = true;
    if (plan.kind == FaultKind::kDelay) {
      ok = faulted.ok();
      outcome = ok ? "completed despite the delay" : std::string(faulted.status().message());
    } else if (faulted.ok()) {
      ok = false;
      outcome = "UNEXPECTED: the run did not fail";
    } else {
      outcome = absl::StrCat("failed: ", faulted.status().message());
      // The last committed checkpoint must load, and training must finish.
      run.fault.reset();
      auto resumed = RunTraining(run);
      if (!resumed.ok()) {
        ok = false;
        absl::StrAppend(&outcome, "\n", std::string(28, ' '), "RESUME FAILED: ", resumed.status().message());
      } else {
        absl::StrAppend(&outcome, "\n", std::string(38, ' '), "resumed from step ", resumed->ranks[0].start_step,
                        " and completed step ", resumed->ranks[0].end_step);
      }
    }
    failures += ok ? 0 : 1;
    out << std::left << std::setw(28) << plan.ToString() << std::setw(10) << std::fixed << std::setprecision(2)
        << seconds << outcome << "\n";
  }
  if (failures > 0) return absl::InternalError(absl::StrCat(failures, " fault plans did not end as expected"));
  return absl::OkStatus();
}

}  // namespace shardlight::simulate
