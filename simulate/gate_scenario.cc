#include "simulate/gate_scenario.h"

#include <iomanip>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lightning/gate/collective_probe.h"
#include "lightning/gate/feature_gate.h"
#include "lightning/gate/simulated_builds.h"
#include "lightning/gate/torch_build.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::simulate {
namespace {

void Row(std::ostream& out, const std::string& name, const std::string& version,
         const lightning::FeatureDecision& d) {
  out << std::left << std::setw(30) << name << std::setw(20) << version << std::setw(9)
      << (d.sharded_supported ? "hooks" : "no hooks") << "  "
      << (d.missing.empty() ? std::string("-") : absl::StrJoin(d.missing, ",")) << "\n"
      << std::setw(30) << "" << "reason: " << d.reason << "\n"
      << std::setw(30) << "" << "version: " << d.version_note << "\n";
}

}  // namespace

absl::Status RunGateScenario(const ScenarioOptions& options, std::ostream& out) {
  out << "feature gate: may a LightningModule register ShardedTensor state-dict hooks?\n"
      << "decided by capability; the version string only explains\n\n";
  out << std::left << std::setw(30) << "build" << std::setw(20) << "version" << std::setw(9) << "decision"
      << "  missing capabilities\n";
  absl::StatusOr<lightning::TorchBuild> real = lightning::TorchBuild::Current();
  Row(out, "this process (real)", real.ok() ? real->version_string() : "(undescribable)",
      lightning::ShardedFeature());
  if (real.ok()) {
    for (const std::string& w : real->Warnings()) out << std::setw(30) << "" << "warning: " << w << "\n";
  }
  int mismatches = 0;
  for (const lightning::SimulatedBuild& sim : lightning::SimulatedBuilds()) {
    const lightning::FeatureDecision d = lightning::Decide(sim);
    Row(out, absl::StrCat("sim: ", sim.name), sim.build.ok() ? sim.build->version_string() : "(undescribable)", d);
    if (d.sharded_supported != sim.expected.sharded_supported) {
      ++mismatches;
      out << std::setw(30) << "" << "UNEXPECTED: this build should decide "
          << (sim.expected.sharded_supported ? "hooks" : "no hooks") << "\n";
    }
  }
  // The runtime half: the collectives themselves, on a live group.
  ClusterOptions cluster_options;
  cluster_options.collective_timeout = options.collective_timeout;
  SimulatedCluster cluster(options.world_size, cluster_options);
  absl::Status probe = cluster.Run(
      [&](RankContext& ctx) { return lightning::ProbeCollectives(*ctx.pg, options.collective_timeout); });
  out << "\ncollective probe on " << options.world_size << " Gloo thread-ranks: "
      << (probe.ok() ? "all required collectives work" : std::string(probe.message())) << "\n";
  if (!probe.ok()) return probe;
  if (mismatches > 0) return absl::InternalError(absl::StrCat(mismatches, " simulated builds decided unexpectedly"));
  return absl::OkStatus();
}

}  // namespace shardlight::simulate
