#include "lightning/tp/mesh_optimizer.h"

#include "lightning/sharded_module.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::tp {

absl::StatusOr<std::unique_ptr<MeshAdamWOptimizer>> MeshAdamWOptimizer::Create(MeshParams params,
                                                                               AdamWOptions options) {
  Trainables local = LocalPieces(params);
  SL_ASSIGN_OR_RETURN(std::unique_ptr<MeshAdamW> adam, MeshAdamW::Create(std::move(params), options));
  return std::unique_ptr<MeshAdamWOptimizer>(new MeshAdamWOptimizer(std::move(local), std::move(adam)));
}

absl::StatusOr<std::unique_ptr<MeshSgdOptimizer>> MeshSgdOptimizer::Create(MeshParams params, SgdOptions options) {
  Trainables local = LocalPieces(params);
  SL_ASSIGN_OR_RETURN(std::unique_ptr<MeshSgd> sgd, MeshSgd::Create(std::move(params), options));
  return std::unique_ptr<MeshSgdOptimizer>(new MeshSgdOptimizer(std::move(local), std::move(sgd)));
}

MeshParams TrainableMeshMembers(torch::nn::Module& module) {
  MeshParams params;
  for (auto& [key, m] : MeshMembers(module, "")) {
    if (m->local().requires_grad()) params.emplace_back(key, m);
  }
  return params;
}

}  // namespace shardlight::lightning::tp
