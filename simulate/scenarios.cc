#include "simulate/collectives_scenario.h"
#include "simulate/gate_scenario.h"
#include "simulate/lm_scenario.h"
#include "simulate/mesh_scenario.h"
#include "simulate/reshard_scenario.h"
#include "simulate/train_scenario.h"
#include "simulate/scenario.h"

namespace shardlight::simulate {

const std::vector<Scenario>& AllScenarios() {
  static const auto* scenarios = new std::vector<Scenario>{
      {"train", "train a sharded-embedding model, checkpoint, reload on another world size, continue (default)",
       &RunTrainScenario, &CheckTrainScenario},
      {"roundtrip", "a model's state dict through a checkpoint into a fresh module: loaded equals saved",
       &RunRoundtripScenario},
      {"reshard", "a sharded tensor through several layouts: values checked, bytes sent vs the minimum",
       &RunReshardScenario},
      {"faults", "crash, crash mid-save, delay and stall a rank: bounded errors, checkpoint intact, resume completes",
       &RunFaultsScenario},
      {"collectives", "allreduce/allgather/broadcast on every rank, values checked, time per rank",
       &RunCollectivesScenario},
      {"gate", "the feature gate's decision for this build beside NGC-style simulated builds, and the probe",
       &RunGateScenario},
      {"mesh", "tensor-parallel layers on a 2x2 device mesh, checked against dense training, reloaded on 1x3",
       &RunMeshScenario},
      {"lm",
       "a GPT language model on byte text, tensor parallel on a 2x2 mesh; checkpoint resumed on 1x3 and 4x1 "
       "(--strategy=fsdp or ddp: data parallel on 4 ranks, resumed on 3 and 2)",
       &RunLmScenario},
  };
  return *scenarios;
}

}  // namespace shardlight::simulate
