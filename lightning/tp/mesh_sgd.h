// MeshSgd: SGD (torch.optim.SGD's update, as lightning::Sgd: weight decay
// added to the gradient, momentum seeded with the first step's gradient, no
// dampening or Nesterov) over parameters that are mesh members. Each rank
// updates its local pieces only; the momentum buffers are mesh tensors of
// each parameter's layout, so they checkpoint and reshard with the model.
// Weight decay applies to every parameter, as torch.optim.SGD's does.
// State keys: "<prefix><param key>.momentum_buffer", "<prefix>step".
#ifndef SHARDLIGHT_LIGHTNING_TP_MESH_SGD_H_
#define SHARDLIGHT_LIGHTNING_TP_MESH_SGD_H_

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lightning/optimizer.h"
#include "lightning/tp/mesh_gradients.h"
#include "sharded/state_dict.h"

namespace shardlight::lightning::tp {

class MeshSgd {
 public:
  // lightning::CheckSgdOptions' errors. No communication (buffers: zeros of each layout).
  static absl::StatusOr<std::unique_ptr<MeshSgd>> Create(MeshParams params, SgdOptions options);
  // One update from the current gradients (a parameter without one is left alone). No communication.
  void Step();
  int64_t steps() const { return step_[0].item<int64_t>(); }
  double lr() const { return options_.lr; }
  void set_lr(double lr) { options_.lr = lr; }

  // The buffers' checkpoint views (each distinct box once) and the step, as
  // MeshAdamW::AddStateTo; CompleteLoad copies each loaded piece to its
  // replicas (collective).
  absl::Status AddStateTo(sharded::StateDict& dict, const std::string& prefix, bool for_load);
  absl::Status CompleteLoad();

 private:
  MeshSgd(MeshParams params, SgdOptions options) : params_(std::move(params)), options_(options) {}
  MeshParams params_;
  SgdOptions options_;
  std::vector<sharded::mesh::MeshTensor> buffers_;
  at::Tensor step_ = at::zeros({1}, at::kLong);
};

}  // namespace shardlight::lightning::tp

#endif  // SHARDLIGHT_LIGHTNING_TP_MESH_SGD_H_
