// MeshAdamWOptimizer and MeshSgdOptimizer: MeshAdamW (mesh_adamw.h) and
// MeshSgd (mesh_sgd.h) behind lightning's Optimizer interface, so a module
// whose parameters are mesh members (the TP layers of this package) trains
// under lightning::Trainer with ModelParallelStrategy or FsdpTpStrategy: its
// ConfigureOptimizers returns one of these.
//
// Checkpoints: AddStateTo gives the state's checkpoint views and the step
// ("<prefix><param>.exp_avg", ".exp_avg_sq" / ".momentum_buffer",
// "<prefix>step"), the same
// views for a save and for a load. A load fills only each piece's owner, so
// after every AddStateTo the next Step first copies each piece from its
// owner to its replicas (mesh::CompleteLoad; collective over the mesh's
// world, which every rank's Step reaches at the same point of the loop;
// after a save it changes nothing).
#ifndef SHARDLIGHT_LIGHTNING_TP_MESH_OPTIMIZER_H_
#define SHARDLIGHT_LIGHTNING_TP_MESH_OPTIMIZER_H_

#include <memory>
#include <stdexcept>
#include <string>

#include "absl/status/statusor.h"
#include "lightning/optimizer.h"
#include "lightning/tp/mesh_adamw.h"
#include "lightning/tp/mesh_sgd.h"

namespace shardlight::lightning::tp {

// What the mesh optimizers share: `Update` (MeshAdamW or MeshSgd) behind
// lightning's Optimizer, and the replicas' copy before the first Step after
// AddStateTo handed out checkpoint views.
template <typename Update>
class MeshOptimizer : public Optimizer {
 public:
  // Throws (as LibTorch ops do) when the replicas' copy fails.
  void Step() override {
    if (replicas_pending_) {
      const absl::Status completed = update_->CompleteLoad();
      if (!completed.ok()) throw std::runtime_error(std::string(completed.message()));
      replicas_pending_ = false;
    }
    update_->Step();
  }
  absl::Status AddStateTo(sharded::StateDict& dict, const std::string& prefix) override {
    replicas_pending_ = true;
    return update_->AddStateTo(dict, prefix, /*for_load=*/false);  // the same views as for_load (no Partial state)
  }
  double lr() const override { return update_->lr(); }

 protected:
  // `local_pieces`: the params' local pieces (the base's ZeroGrad drops their gradients).
  MeshOptimizer(Trainables local_pieces, std::unique_ptr<Update> update)
      : Optimizer(std::move(local_pieces)), update_(std::move(update)) {}
  void SetLr(double lr) override { update_->set_lr(lr); }
  static Trainables LocalPieces(const MeshParams& params) {
    Trainables local;
    for (const auto& [key, p] : params) local.dense.push_back({key, p->local()});
    return local;
  }
  std::unique_ptr<Update> update_;

 private:
  bool replicas_pending_ = false;
};

class MeshAdamWOptimizer : public MeshOptimizer<MeshAdamW> {
 public:
  // MeshAdamW::Create's errors.
  static absl::StatusOr<std::unique_ptr<MeshAdamWOptimizer>> Create(MeshParams params, AdamWOptions options);
  MeshAdamW& adam() { return *update_; }

 private:
  using MeshOptimizer::MeshOptimizer;
};

// SGD over mesh members (mesh_sgd.h), for any strategy a mesh module trains
// under (model_parallel, fsdp_tp).
class MeshSgdOptimizer : public MeshOptimizer<MeshSgd> {
 public:
  // MeshSgd::Create's errors.
  static absl::StatusOr<std::unique_ptr<MeshSgdOptimizer>> Create(MeshParams params, SgdOptions options);
  MeshSgd& sgd() { return *update_; }

 private:
  using MeshOptimizer::MeshOptimizer;
};

// Every mesh member of `module`'s tree whose local piece requires grad.
MeshParams TrainableMeshMembers(torch::nn::Module& module);

}  // namespace shardlight::lightning::tp

#endif  // SHARDLIGHT_LIGHTNING_TP_MESH_OPTIMIZER_H_
