// bazel run //simulate:cluster -- --world_size=N --scenario=NAME
//
// Runs one scenario on a simulated cluster of N thread-ranks and prints its
// per-rank report. Exit codes: 0 success, 1 the scenario failed, 2 bad flags
// (including a --fault the scenario would ignore or that could never happen,
// a stray positional word, a --checkpoint_dir that cannot be a writable
// directory).
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "simulate/lm_scenario.h"
#include "simulate/scenario.h"
#include "simulate/core/simulated_cluster.h"
#include "flags/directory_flag.h"
#include "flags/strict_flags.h"

ABSL_FLAG(int, world_size, 4, "number of thread-ranks, 1..64");
ABSL_FLAG(std::string, scenario, "train", "which scenario to run (see --help)");
ABSL_FLAG(int, steps, 20, "steps or rounds the scenario runs, >= 1");
ABSL_FLAG(uint64_t, seed, 1234, "seed for every random value the scenario draws");
ABSL_FLAG(int, timeout_ms, 30000, "collective timeout in milliseconds, > 0");
ABSL_FLAG(int, log_every, 0, "train scenario: print step, loss and steps/s every N steps (0: off)");
ABSL_FLAG(std::string, checkpoint_dir, "", "where the train scenario checkpoints (default: a temporary directory)");
ABSL_FLAG(bool, allow_different_run, false,
          "train scenario: resume the checkpoint in --checkpoint_dir even when another run (seed, model, "
          "options) wrote it");
ABSL_FLAG(bool, async_checkpoint, false,
          "train scenario: write checkpoints in the background while training goes on (own process group, "
          "256 MiB of staging per rank)");
ABSL_FLAG(std::string, logdir, "lm_logs",
          "lm scenario: where the 2x2 run's metrics.csv and TensorBoard event file go; relative to the directory "
          "`bazel run` was called from (empty: no logs)");
ABSL_FLAG(std::string, strategy, "model_parallel",
          "lm scenario: the Trainer's strategy -- model_parallel (DP x TP on a 2x2 mesh), fsdp_tp (the same mesh, "
          "each TP piece sharded again over DP), fsdp (fully sharded, one unit per block), ddp (the last two data "
          "parallel on 4 ranks) or hsdp");
ABSL_FLAG(bool, fsdp_per_unit, true,
          "lm scenario, --strategy=fsdp: gather one block at a time inside the step (fully_shard's default); "
          "false: the whole model for the step");
ABSL_FLAG(std::string, param_dtype, "",
          "lm scenario, --strategy=fsdp: FSDP2's MixedPrecisionPolicy param_dtype (bf16, fp32, ...): parameters "
          "gathered and computed in it, AdamW on the float32 shards; empty: float32");
ABSL_FLAG(std::string, reduce_dtype, "",
          "lm scenario, --strategy=fsdp: the dtype the gradients are summed in (fp32, bf16, ...); empty: float32");
ABSL_FLAG(std::string, fault, "",
          "train scenario: inject a fault plan, e.g. crash:rank=1,step=3, save-crash:rank=2,step=2, "
          "delay:rank=0,step=2,ms=200, timeout:rank=1,step=3");

namespace shardlight::simulate {
namespace {

std::string ScenarioList() {
  std::string list;
  for (const Scenario& s : AllScenarios()) absl::StrAppend(&list, "\n  ", s.name, ": ", s.description);
  return list;
}

int Main() {
  ScenarioOptions options;
  options.world_size = absl::GetFlag(FLAGS_world_size);
  options.steps = absl::GetFlag(FLAGS_steps);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.collective_timeout = std::chrono::milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.fault = absl::GetFlag(FLAGS_fault);
  options.log_every = absl::GetFlag(FLAGS_log_every);
  options.allow_different_run = absl::GetFlag(FLAGS_allow_different_run);
  options.async_checkpoint = absl::GetFlag(FLAGS_async_checkpoint);
  options.log_dir = absl::GetFlag(FLAGS_logdir);
  // Under `bazel run` the binary runs in its runfiles: a relative log_dir is the caller's.
  const char* caller_dir = std::getenv("BUILD_WORKING_DIRECTORY");
  if (!options.log_dir.empty() && options.log_dir[0] != '/' && caller_dir != nullptr && caller_dir[0] != '\0') {
    options.log_dir = absl::StrCat(caller_dir, "/", options.log_dir);
  }
  options.progress_bar = isatty(STDOUT_FILENO) != 0;  // a bar on a terminal, plain lines otherwise
  options.strategy = absl::GetFlag(FLAGS_strategy);
  options.fsdp_per_unit = absl::GetFlag(FLAGS_fsdp_per_unit);
  options.param_dtype = absl::GetFlag(FLAGS_param_dtype);
  options.reduce_dtype = absl::GetFlag(FLAGS_reduce_dtype);
  if (options.log_every < 0) {
    std::cerr << "cluster: --log_every must be >= 0\n";
    return 2;
  }
  const std::string name = absl::GetFlag(FLAGS_scenario);

  if (options.world_size < 1 || options.world_size > SimulatedCluster::kMaxWorldSize) {
    std::cerr << "cluster: --world_size=" << options.world_size << " is outside [1, "
              << SimulatedCluster::kMaxWorldSize << "]\n";
    return 2;
  }
  if (options.steps < 1) {
    std::cerr << "cluster: --steps=" << options.steps << " must be >= 1\n";
    return 2;
  }
  if (options.collective_timeout.count() <= 0) {
    std::cerr << "cluster: --timeout_ms must be > 0\n";
    return 2;
  }
  const Scenario* scenario = nullptr;
  for (const Scenario& s : AllScenarios()) {
    if (s.name == name) scenario = &s;
  }
  if (scenario == nullptr) {
    std::cerr << "cluster: unknown --scenario='" << name << "'; known scenarios:" << ScenarioList() << "\n";
    return 2;
  }
  if (name != "lm" && options.strategy != "model_parallel") {
    std::cerr << "cluster: --strategy applies to --scenario=lm; scenario '" << name << "' would ignore it\n";
    return 2;
  }
  if (name != "lm" && !options.fsdp_per_unit) {
    std::cerr << "cluster: --fsdp_per_unit applies to --scenario=lm --strategy=fsdp; scenario '" << name
              << "' would ignore it\n";
    return 2;
  }
  if (name != "lm" && (!options.param_dtype.empty() || !options.reduce_dtype.empty())) {
    std::cerr << "cluster: --param_dtype and --reduce_dtype apply to --scenario=lm --strategy=fsdp; scenario '" << name
              << "' would ignore them\n";
    return 2;
  }
  if (name == "lm") {
    if (absl::Status checked = CheckLmScenarioStrategy(options); !checked.ok()) {
      std::cerr << "cluster: " << checked.message() << "\n";
      return 2;
    }
  }
  if (scenario->check == nullptr && !options.fault.empty()) {
    std::cerr << "cluster: --fault applies to --scenario=train; scenario '" << name << "' would ignore it\n";
    return 2;
  }
  if (scenario->check == nullptr && options.async_checkpoint) {
    std::cerr << "cluster: --async_checkpoint applies to --scenario=train; scenario '" << name
              << "' would ignore it\n";
    return 2;
  }
  if (scenario->check != nullptr) {
    if (absl::Status checked = scenario->check(options); !checked.ok()) {
      std::cerr << "cluster: " << checked.message() << "\n";
      return 2;
    }
  }
  // Last: it creates the directory.
  if (!options.checkpoint_dir.empty()) {
    const std::string error = tools::flags::PrepareWritableDirectory("checkpoint_dir", options.checkpoint_dir);
    if (!error.empty()) {
      std::cerr << "cluster: " << error << "\n";
      return 2;
    }
  }
  absl::Status status = scenario->run(options, std::cout);
  if (!status.ok()) {
    std::cerr << "cluster: scenario '" << name << "' failed: " << status << "\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace shardlight::simulate

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      absl::StrCat("Runs a scenario on a simulated cluster of thread-ranks.\n"
                   "  bazel run //simulate:cluster -- --world_size=4 --scenario=NAME\n"
                   "Scenarios:",
                   shardlight::simulate::ScenarioList()));
  shardlight::tools::flags::ParseOnlyFlagsOrExit(argc, argv);
  return shardlight::simulate::Main();
}
