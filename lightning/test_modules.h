// Test support: a LightningModule tree with dense parameters, buffers and
// sharded members at three depths, as the state-dict tests and scenarios use.
//
//   root (LightningModule)      sharded "table" [13, 6], chunk dim 0
//     encoder (ShardedModule)   Linear "proj", buffer "scale", sharded "keys" [7, 5], chunk dim 1
//       block (ShardedModule)   Linear "ff", sharded "weight" [9, 4, 3], grid or chunk dim 0
#ifndef SHARDLIGHT_LIGHTNING_TEST_MODULES_H_
#define SHARDLIGHT_LIGHTNING_TEST_MODULES_H_

#include <torch/nn/modules/linear.h>

#include <memory>

#include "lightning/lightning_module.h"

namespace shardlight::lightning::testing {

struct Block : ShardedModule {
  explicit Block(const FeatureDecision& gate);
  torch::nn::Linear ff{nullptr};
};

struct Encoder : ShardedModule {
  explicit Encoder(const FeatureDecision& gate);
  torch::nn::Linear proj{nullptr};
  at::Tensor scale;
  std::shared_ptr<Block> block;
};

struct TreeModule : LightningModule {
  // `alt_layout` shards every member differently (other dims, a grid).
  explicit TreeModule(const FeatureDecision& gate = ShardedFeature(), bool alt_layout = false);
  absl::Status ConfigureShardedModel(const ShardedContext& ctx) override;
  std::shared_ptr<Encoder> encoder;
  bool alt_layout;
};

// Builds a TreeModule and configures its sharded members on ctx's group, all
// values drawn from `seed`.
absl::StatusOr<std::shared_ptr<TreeModule>> MakeTree(const ShardedContext& ctx, bool alt_layout = false);

}  // namespace shardlight::lightning::testing

#endif  // SHARDLIGHT_LIGHTNING_TEST_MODULES_H_
