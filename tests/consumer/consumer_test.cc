// Compiled in a separate workspace set up as README.md's "Depending on
// shardlight" says: proves the public @shardlight labels (sharded,
// checkpoint, lightning, simulate), deps.bzl and the include paths work from
// outside the repository.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "lightning/lightning_module.h"
#include "lightning/state_dict_hooks.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/factories.h"
#include "simulate/core/simulated_cluster.h"

namespace {

using shardlight::simulate::RankContext;

// A module with one sharded member, created once the group exists.
struct Table : shardlight::lightning::LightningModule {
  Table() : LightningModule("Table") {}
  absl::Status ConfigureShardedModel(const shardlight::lightning::ShardedContext& ctx) override {
    auto table = shardlight::sharded::Randn(shardlight::sharded::ChunkShardingSpec::OnRanks(0, ctx.world_size),
                                           {10, 4}, ctx.seed, {}, ctx.pg);
    if (!table.ok()) return table.status();
    return RegisterShardedTensor("table", *std::move(table));
  }
};

TEST(ConsumerTest, RunsAThreeRankAllreduce) {
  shardlight::simulate::SimulatedCluster cluster(3);
  auto sums = cluster.Run([](RankContext& ctx) {
    std::vector<at::Tensor> t = {at::ones({1})};
    ctx.pg->allreduce(t)->wait();
    return t[0].item<float>();
  });
  ASSERT_TRUE(sums.ok()) << sums.status();
  for (float s : *sums) EXPECT_EQ(s, 3.0f);
}

TEST(ConsumerTest, SavesAModuleAndLoadsItIntoAnother) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/consumer_ckpt";
  shardlight::simulate::SimulatedCluster cluster(2);
  auto equal = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<bool> {
    Table saved, loaded;
    if (auto s = saved.ConfigureShardedModel({ctx.pg, ctx.rank, ctx.world_size, 7}); !s.ok()) return s;
    if (auto s = loaded.ConfigureShardedModel({ctx.pg, ctx.rank, ctx.world_size, 8}); !s.ok()) return s;
    auto dict = shardlight::lightning::StateDictOf(saved);
    if (!dict.ok()) return dict.status();
    if (auto s = shardlight::sharded::checkpoint::SaveCheckpoint(*dict, dir, *ctx.pg); !s.ok()) return s;
    auto to_fill = shardlight::lightning::StateDictOf(loaded);
    if (!to_fill.ok()) return to_fill.status();
    if (auto s = shardlight::sharded::checkpoint::LoadCheckpoint(*to_fill, dir, *ctx.pg); !s.ok()) return s;
    auto a = saved.sharded_tensor("table")->FullTensor();
    auto b = loaded.sharded_tensor("table")->FullTensor();
    if (!a.ok() || !b.ok()) return absl::InternalError("FullTensor failed");
    return at::equal(*a, *b);
  });
  ASSERT_TRUE(equal.ok()) << equal.status();
  for (bool e : *equal) EXPECT_TRUE(e);
}

}  // namespace
