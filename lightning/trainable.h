// Trainables: the tensors an optimizer updates, gathered from a module tree.
//
// Dense parameters (shared by every rank, gradients all-reduced by the
// Trainer) and sharded members whose properties say requires_grad (each rank
// updates only its local shards; their gradients never leave the rank).
// A parameter the root holds sharded (ShardedModule::sharded_parameters: FSDP)
// is listed as its shard, a sharded trainable, and not as a dense one.
#ifndef SHARDLIGHT_LIGHTNING_TRAINABLE_H_
#define SHARDLIGHT_LIGHTNING_TRAINABLE_H_

#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "sharded/sharded_tensor.h"

namespace shardlight::lightning {

struct DenseTrainable {
  std::string key;  // state-dict key
  at::Tensor param;
};

struct ShardedTrainable {
  std::string key;
  sharded::ShardedTensor* member;  // owned by its ShardedModule
};

struct Trainables {
  std::vector<DenseTrainable> dense;
  std::vector<ShardedTrainable> sharded;

  // Every local tensor an optimizer touches, dense first.
  std::vector<at::Tensor> LocalTensors() const;
};

// Parameters with requires_grad, and sharded members of the tree with it.
Trainables TrainablesOf(torch::nn::Module& module);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_TRAINABLE_H_
