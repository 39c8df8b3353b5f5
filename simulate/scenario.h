// Scenario: one named run of the simulated cluster binary (//simulate:cluster).
//
// Each scenario lives in its own file and registers itself in scenarios.cc; the
// binary only parses flags, picks a scenario by name and prints its report.
#ifndef SHARDLIGHT_SIMULATE_SCENARIO_H_
#define SHARDLIGHT_SIMULATE_SCENARIO_H_

#include <chrono>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace shardlight::simulate {

struct ScenarioOptions {
  int world_size = 4;
  int steps = 10;
  uint64_t seed = 1234;
  std::chrono::milliseconds collective_timeout{std::chrono::seconds(30)};
  std::string checkpoint_dir;  // empty: a temporary directory, removed afterwards
  std::string fault;           // a fault plan (fault_plan.h) for the train scenario; empty: none
  int64_t log_every = 0;       // train: a progress line every this many steps; 0: none
  bool allow_different_run = false;  // train: resume a checkpoint_dir another run wrote
  bool async_checkpoint = false;     // train: checkpoints written in the background
  std::string log_dir;               // lm: CSV and TensorBoard logs of the 2x2 run (empty: none)
  bool progress_bar = false;         // lm: a progress bar in place of the step lines (a terminal)
  std::string strategy = "model_parallel";  // lm: model_parallel, fsdp or ddp (lm_run.h)
  bool fsdp_per_unit = true;  // lm under fsdp: one block gathered at a time (LmJobOptions::fsdp_per_unit)
  // lm under fsdp: the mixed-precision policy (LmJobOptions::param_dtype, reduce_dtype); "": none.
  std::string param_dtype;
  std::string reduce_dtype;
};

struct Scenario {
  std::string name;
  std::string description;
  // Runs the scenario, writing its report to `out`. A non-OK status is the
  // scenario's failure (the binary prints it and exits 1).
  absl::Status (*run)(const ScenarioOptions& options, std::ostream& out);
  // Checks the options before anything runs: InvalidArgument for one the
  // scenario cannot honour (the binary exits 2). Null: the scenario takes no
  // --fault or --async_checkpoint (the binary refuses them) and has nothing
  // else to check.
  absl::Status (*check)(const ScenarioOptions& options) = nullptr;
};

// Every scenario the binary knows, in the order --help lists them.
const std::vector<Scenario>& AllScenarios();

}  // namespace shardlight::simulate

#endif  // SHARDLIGHT_SIMULATE_SCENARIO_H_
