#include "simulate/collectives_scenario.h"
#include "simulate/gate_scenario.h"
#include "simulate/scenario.h"

namespace shardlight::simulate {

const std::vector<Scenario>& AllScenarios() {
  static const auto* scenarios = new std::vector<Scenario>{
      {"collectives", "allreduce/allgather/broadcast on every rank, values checked, time per rank",
       &RunCollectivesScenario},
      {"gate", "the feature gate's decision for this build beside NGC-style simulated builds, and the probe",
       &RunGateScenario},
  };
  return *scenarios;
}

}  // namespace shardlight::simulate
