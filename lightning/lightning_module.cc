#include "lightning/lightning_module.h"

#include <cstdlib>
#include <iostream>
#include <utility>

namespace shardlight::lightning {

LightningModule::LightningModule(std::string name, const FeatureDecision& gate)
    : ShardedModule(std::move(name), gate) {
  if (!gate.sharded_supported) {
    // A debug line only: the reason stays available as gate().reason.
    if (const char* debug = std::getenv("SHARDLIGHT_DEBUG"); debug != nullptr && *debug != '\0') {
      std::cerr << "shardlight: " << this->name() << ": ShardedTensor state-dict hooks not registered: "
                << gate.reason << "\n";
    }
    return;
  }
  // Plain functions of (module, dict, prefix): the hooks hold no reference
  // to this module, so registering them cannot keep it alive.
  state_dict_hook_ = AddStateDictHook(&AddShardedMembersToStateDict);
  load_pre_hook_ = AddLoadPreHook(&RestoreShardedMembersBeforeLoad);
  hooks_registered_ = true;
}

absl::Status LightningModule::ConfigureShardedModel(const ShardedContext&) { return absl::OkStatus(); }

absl::StatusOr<at::Tensor> LightningModule::TrainingStep(const Batch&, const StepContext&) {
  return absl::UnimplementedError(name() + " does not override LightningModule::TrainingStep");
}

absl::StatusOr<ValidationLog> LightningModule::ValidationStep(const Batch&, const StepContext&) {
  return absl::UnimplementedError(name() + " does not override LightningModule::ValidationStep");
}

absl::StatusOr<std::unique_ptr<Optimizer>> LightningModule::ConfigureOptimizers() {
  auto sgd = Sgd::Create(TrainablesOf(*this), SgdOptions{});
  if (!sgd.ok()) return sgd.status();
  return std::unique_ptr<Optimizer>(*std::move(sgd));
}

absl::StatusOr<OptimizerConfig> LightningModule::ConfigureOptimizersAndSchedule() {
  auto optimizer = ConfigureOptimizers();
  if (!optimizer.ok()) return optimizer.status();
  return OptimizerConfig{*std::move(optimizer), nullptr};
}

}  // namespace shardlight::lightning
