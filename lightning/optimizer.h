// Optimizers over Trainables, with state that checkpoints like the model:
// dense state for dense parameters, a ShardedTensor (same layout) for a
// sharded parameter, so optimizer state is saved shard-by-shard and reloads
// on any world size.
//
// Sgd: SGD with momentum and weight decay (PyTorch's update rule: the first
// step seeds the buffer with the gradient). A parameter without a gradient is
// left alone. AddStateTo/state keys: "<prefix><param key>.momentum_buffer",
// plus "<prefix>step".
#ifndef SHARDLIGHT_LIGHTNING_OPTIMIZER_H_
#define SHARDLIGHT_LIGHTNING_OPTIMIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lightning/trainable.h"
#include "sharded/state_dict.h"

namespace shardlight::lightning {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Updates every trainable from its gradient. No communication.
  virtual void Step() = 0;
  // Drops every trainable's gradient.
  void ZeroGrad();
  // Adds the optimizer state (sharing storage: loading into the returned
  // entries restores the state in place).
  virtual absl::Status AddStateTo(sharded::StateDict& dict, const std::string& prefix) = 0;

 protected:
  explicit Optimizer(Trainables trainables) : trainables_(std::move(trainables)) {}
  Trainables trainables_;
};

struct SgdOptions {
  double lr = 0.05;
  double momentum = 0.9;
  double weight_decay = 0.0;
};

class Sgd : public Optimizer {
 public:
  // InvalidArgument for a learning rate that is not positive, a momentum
  // outside [0, 1) or a negative weight decay. Momentum buffers take each
  // trainable's layout (ShardedTensor::ZerosLike: no communication).
  static absl::StatusOr<std::unique_ptr<Sgd>> Create(Trainables trainables, SgdOptions options);
  void Step() override;
  absl::Status AddStateTo(sharded::StateDict& dict, const std::string& prefix) override;
  int64_t steps() const { return step_[0].item<int64_t>(); }

 private:
  Sgd(Trainables trainables, SgdOptions options);
  SgdOptions options_;
  std::vector<at::Tensor> dense_buffers_;             // one per dense trainable
  std::vector<sharded::ShardedTensor> sharded_buffers_;  // one per sharded trainable
  at::Tensor step_;  // int64 [1]; buffers are seeded from the gradient while it is 0
};

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_OPTIMIZER_H_
