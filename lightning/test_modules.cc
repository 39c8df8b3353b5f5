#include "lightning/test_modules.h"

#include <ATen/core/grad_mode.h>

#include "sharded/factories.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::testing {

using sharded::ChunkShardingSpec;

Block::Block(const FeatureDecision& gate) : ShardedModule("Block", gate) {
  ff = register_module("ff", torch::nn::Linear(4, 3));
}

Encoder::Encoder(const FeatureDecision& gate) : ShardedModule("Encoder", gate) {
  proj = register_module("proj", torch::nn::Linear(6, 4));
  scale = register_buffer("scale", at::ones({4}));
  block = register_module("block", std::make_shared<Block>(gate));
}

TreeModule::TreeModule(const FeatureDecision& gate, bool alt) : LightningModule("TreeModule", gate), alt_layout(alt) {
  encoder = register_module("encoder", std::make_shared<Encoder>(gate));
}

absl::Status TreeModule::ConfigureShardedModel(const ShardedContext& ctx) {
  const int w = ctx.world_size;
  sharded::ShardedOptions grad;
  grad.requires_grad = true;
  SL_ASSIGN_OR_RETURN(auto table, sharded::Randn(ChunkShardingSpec::OnRanks(alt_layout ? 1 : 0, w), {13, 6},
                                                 ctx.seed + 1, grad, ctx.pg));
  SL_RETURN_IF_ERROR(RegisterShardedTensor("table", std::move(table)));
  SL_ASSIGN_OR_RETURN(auto keys, sharded::Rand(ChunkShardingSpec::OnRanks(alt_layout ? 0 : 1, w), {7, 5},
                                               ctx.seed + 2, {}, ctx.pg));
  SL_RETURN_IF_ERROR(encoder->RegisterShardedTensor("keys", std::move(keys)));
  sharded::ShardingSpec weight_spec = ChunkShardingSpec::OnRanks(0, w);
  if (alt_layout) {  // a grid with several shards per rank, uneven on purpose
    sharded::EnumerableShardingSpec grid;
    const int64_t rows[] = {0, 2, 7, 9};
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 2; ++j) {
        grid.shards.push_back({{rows[i], 0, j}, {rows[i + 1] - rows[i], 4, j == 0 ? 1 : 2},
                               sharded::Placement::Cpu((i * 2 + j) % w)});
      }
    }
    weight_spec = grid;
  }
  SL_ASSIGN_OR_RETURN(auto weight, sharded::Randn(weight_spec, {9, 4, 3}, ctx.seed + 3, {}, ctx.pg));
  return encoder->block->RegisterShardedTensor("weight", std::move(weight));
}

absl::StatusOr<std::shared_ptr<TreeModule>> MakeTree(const ShardedContext& ctx, bool alt_layout) {
  auto module = std::make_shared<TreeModule>(ShardedFeature(), alt_layout);
  // Dense values from the seed too, so two trees with one seed are equal.
  at::NoGradGuard no_grad;
  int i = 0;
  for (auto& p : module->parameters()) {
    p.copy_(at::arange(p.numel(), p.options()).view_as(p).mul_(0.01).add_(static_cast<double>(ctx.seed % 97) + i++));
  }
  SL_RETURN_IF_ERROR(module->ConfigureShardedModel(ctx));
  return module;
}

}  // namespace shardlight::lightning::testing
