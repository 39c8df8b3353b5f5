// SimulatedBuilds: fake LibTorch builds, each with the feature-gate decision
// it must produce, so the gate is tested (and the cluster binary can show a
// table) over builds this machine does not have: NGC's "1.10.0a0+ecc3718",
// a CUDA 2.1 wheel, a build without c10d, dev/rc builds, a malformed version
// string, a header/library mismatch, an undescribable build, the environment
// override. The TorchBuilds are fabricated from realistic at::show_config()
// text; they are descriptions only (no fake library is loaded).
//
// Nothing here fails: a build whose description does not parse is kept as
// that error (build.status()), and its expected decision is "off".
#ifndef SHARDLIGHT_LIGHTNING_GATE_SIMULATED_BUILDS_H_
#define SHARDLIGHT_LIGHTNING_GATE_SIMULATED_BUILDS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lightning/gate/feature_gate.h"
#include "lightning/gate/torch_build.h"

namespace shardlight::lightning {

struct ExpectedDecision {
  bool sharded_supported = false;
  std::vector<std::string> missing;         // exactly FeatureDecision::missing
  std::vector<std::string> reason_mentions;  // substrings of FeatureDecision::reason
  std::vector<std::string> note_mentions;    // substrings of FeatureDecision::version_note
};

struct SimulatedBuild {
  std::string name;         // short, table-friendly: "ngc-21.07"
  std::string description;  // one line: what real build it stands for
  absl::StatusOr<TorchBuild> build;
  GateEnvironment environment;
  ExpectedDecision expected;
};

std::vector<SimulatedBuild> SimulatedBuilds();

// The gate's decision for a simulated build (its own environment, not the process's).
FeatureDecision Decide(const SimulatedBuild& simulated);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_GATE_SIMULATED_BUILDS_H_
