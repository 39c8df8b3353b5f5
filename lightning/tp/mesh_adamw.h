// MeshAdamW: AdamW (PyTorch's torch.optim.AdamW update, decoupled weight
// decay) over parameters that are mesh members. Each rank updates its local
// pieces only; the moments are mesh tensors of each parameter's layout, so
// they checkpoint and reshard with the model (AddStateTo / CompleteLoad).
//
// Weight decay applies to parameters of 2 or more dims (weight matrices and
// embeddings), not to biases and norm gains, as GPT training does.
// State keys: "<prefix><param key>.exp_avg", ".exp_avg_sq", "<prefix>step".
#ifndef SHARDLIGHT_LIGHTNING_TP_MESH_ADAMW_H_
#define SHARDLIGHT_LIGHTNING_TP_MESH_ADAMW_H_

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lightning/tp/mesh_gradients.h"
#include "sharded/state_dict.h"

namespace shardlight::lightning::tp {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class MeshAdamW {
 public:
  // InvalidArgument for lr <= 0, betas outside [0, 1), eps <= 0 or a negative
  // weight decay. No communication (moments: zeros of each layout).
  static absl::StatusOr<std::unique_ptr<MeshAdamW>> Create(MeshParams params, AdamWOptions options);
  // One update from the current gradients (a parameter without one is left
  // alone). No communication.
  void Step();
  void ZeroGrad();
  int64_t steps() const { return step_[0].item<int64_t>(); }
  // The learning rate the next Step uses; an LR schedule sets it (through
  // MeshAdamWOptimizer::set_lr, which checks it) before each step.
  double lr() const { return options_.lr; }
  void set_lr(double lr) { options_.lr = lr; }

  // The moments' checkpoint views (each distinct box once) and the step,
  // sharing storage. For a save: AddStateTo(dict, prefix, /*for_load=*/false).
  // For a load: AddStateTo(..., true), LoadCheckpoint, then CompleteLoad()
  // (collective: copies each loaded piece to its replicas).
  absl::Status AddStateTo(sharded::StateDict& dict, const std::string& prefix, bool for_load);
  absl::Status CompleteLoad();

 private:
  MeshAdamW(MeshParams params, AdamWOptions options) : params_(std::move(params)), options_(options) {}
  MeshParams params_;
  AdamWOptions options_;
  std::vector<sharded::mesh::MeshTensor> exp_avg_, exp_avg_sq_;
  at::Tensor step_ = at::zeros({1}, at::kLong);
};

}  // namespace shardlight::lightning::tp

#endif  // SHARDLIGHT_LIGHTNING_TP_MESH_ADAMW_H_
