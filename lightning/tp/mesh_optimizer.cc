#include "lightning/tp/mesh_optimizer.h"

#include <stdexcept>

#include "lightning/sharded_module.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::tp {

absl::StatusOr<std::unique_ptr<MeshAdamWOptimizer>> MeshAdamWOptimizer::Create(MeshParams params,
                                                                               AdamWOptions options) {
  // The base's ZeroGrad drops the gradients of these: the local pieces.
  Trainables local_pieces;
  for (const auto& [key, p] : params) local_pieces.dense.push_back({key, p->local()});
  SL_ASSIGN_OR_RETURN(std::unique_ptr<MeshAdamW> adam, MeshAdamW::Create(std::move(params), options));
  return std::unique_ptr<MeshAdamWOptimizer>(new MeshAdamWOptimizer(std::move(local_pieces), std::move(adam)));
}

void MeshAdamWOptimizer::Step() {
  if (replicas_pending_) {
    const absl::Status completed = adam_->CompleteLoad();
    if (!completed.ok()) throw std::runtime_error(std::string(completed.message()));
    replicas_pending_ = false;
  }
  adam_->Step();
}

absl::Status MeshAdamWOptimizer::AddStateTo(sharded::StateDict& dict, const std::string& prefix) {
  replicas_pending_ = true;
  return adam_->AddStateTo(dict, prefix, /*for_load=*/false);  // the same views as for_load (no Partial moments)
}

MeshParams TrainableMeshMembers(torch::nn::Module& module) {
  MeshParams params;
  for (auto& [key, m] : MeshMembers(module, "")) {
    if (m->local().requires_grad()) params.emplace_back(key, m);
  }
  return params;
}

}  // namespace shardlight::lightning::tp
