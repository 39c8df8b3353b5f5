// MeshAdamWOptimizer: MeshAdamW (mesh_adamw.h) behind lightning's Optimizer
// interface, so a module whose parameters are mesh members (the TP layers of
// this package) trains under lightning::Trainer with ModelParallelStrategy:
// its ConfigureOptimizers returns one of these.
//
// Checkpoints: AddStateTo gives the moments' checkpoint views and the step
// ("<prefix><param>.exp_avg", ".exp_avg_sq", "<prefix>step"), the same
// views for a save and for a load. A load fills only each piece's owner, so
// after every AddStateTo the next Step first copies each piece from its
// owner to its replicas (mesh::CompleteLoad; collective over the mesh's
// world, which every rank's Step reaches at the same point of the loop;
// after a save it changes nothing).
#ifndef SHARDLIGHT_LIGHTNING_TP_MESH_OPTIMIZER_H_
#define SHARDLIGHT_LIGHTNING_TP_MESH_OPTIMIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lightning/optimizer.h"
#include "lightning/tp/mesh_adamw.h"

namespace shardlight::lightning::tp {

class MeshAdamWOptimizer : public Optimizer {
 public:
  // MeshAdamW::Create's errors.
  static absl::StatusOr<std::unique_ptr<MeshAdamWOptimizer>> Create(MeshParams params, AdamWOptions options);
  // Throws (as LibTorch ops do) when the replicas' copy fails.
  void Step() override;
  absl::Status AddStateTo(sharded::StateDict& dict, const std::string& prefix) override;
  MeshAdamW& adam() { return *adam_; }
  double lr() const override { return adam_->lr(); }

 protected:
  void SetLr(double lr) override { adam_->set_lr(lr); }

 private:
  MeshAdamWOptimizer(Trainables local_pieces, std::unique_ptr<MeshAdamW> adam)
      : Optimizer(std::move(local_pieces)), adam_(std::move(adam)) {}
  std::unique_ptr<MeshAdamW> adam_;
  bool replicas_pending_ = false;
};

// Every mesh member of `module`'s tree whose local piece requires grad.
MeshParams TrainableMeshMembers(torch::nn::Module& module);

}  // namespace shardlight::lightning::tp

#endif  // SHARDLIGHT_LIGHTNING_TP_MESH_OPTIMIZER_H_
