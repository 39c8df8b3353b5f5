// LightningModule's constructor and the feature gate: over every simulated
// build (NGC-style mismatches included) the hooks are registered exactly when
// the gate allows, registering a sharded member otherwise fails naming the
// missing capability, and dense state dicts work either way.
#include "lightning/lightning_module.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include "absl/strings/str_join.h"
#include "lightning/gate/simulated_builds.h"
#include "sharded/factories.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning {
namespace {

using ::testing::HasSubstr;

struct Dense : LightningModule {
  explicit Dense(const FeatureDecision& gate) : LightningModule("Dense", gate) {
    fc = register_module("fc", torch::nn::Linear(3, 2));
  }
  torch::nn::Linear fc{nullptr};
};

TEST(LightningModuleTest, GateMatrixOverSimulatedBuilds) {
  const std::vector<SimulatedBuild> builds = SimulatedBuilds();
  ASSERT_GE(builds.size(), 8u);
  int on = 0, off = 0;
  simulate::SimulatedCluster cluster(1);
  for (const SimulatedBuild& sim : builds) {
    SCOPED_TRACE(sim.name);
    const FeatureDecision decision = Decide(sim);
    ASSERT_EQ(decision.sharded_supported, sim.expected.sharded_supported) << decision.reason;
    auto module = std::make_shared<Dense>(decision);
    EXPECT_EQ(module->sharded_hooks_registered(), decision.sharded_supported);
    EXPECT_EQ(module->num_state_dict_hooks(), decision.sharded_supported ? 1u : 0u);
    EXPECT_EQ(module->num_load_pre_hooks(), decision.sharded_supported ? 1u : 0u);
    EXPECT_EQ(module->gate().reason, decision.reason);
    (decision.sharded_supported ? on : off)++;

    absl::Status status = cluster.Run([&](simulate::RankContext& ctx) -> absl::Status {
      auto st = sharded::Zeros(sharded::ChunkShardingSpec::OnRanks(0, 1), {4}, {}, ctx.pg);
      if (!st.ok()) return st.status();
      absl::Status reg = module->RegisterShardedTensor("table", *st);
      if (decision.sharded_supported) {
        EXPECT_TRUE(reg.ok()) << reg;
      } else {
        EXPECT_EQ(reg.code(), absl::StatusCode::kFailedPrecondition);
        EXPECT_THAT(std::string(reg.message()), HasSubstr("lacks ShardedTensor support"));
        for (const std::string& m : decision.missing) EXPECT_THAT(std::string(reg.message()), HasSubstr(m));
      }
      // Dense parameters round-trip the same either way.
      auto dict = StateDictOf(*module);
      if (!dict.ok()) return dict.status();
      EXPECT_EQ(dict->Contains("table"), decision.sharded_supported);
      auto fresh = std::make_shared<Dense>(decision);
      if (decision.sharded_supported) {
        auto again = sharded::Ones(sharded::ChunkShardingSpec::OnRanks(0, 1), {4}, {}, ctx.pg);
        if (!again.ok()) return again.status();
        if (absl::Status s = fresh->RegisterShardedTensor("table", *again); !s.ok()) return s;
      }
      auto report = LoadStateDict(*fresh, *std::move(dict));
      if (!report.ok()) return report.status();
      EXPECT_TRUE(at::equal(fresh->fc->weight, module->fc->weight));
      if (decision.sharded_supported) {
        EXPECT_EQ(fresh->sharded_tensor("table")->local_shards()[0].tensor.sum().item<float>(), 0.0f);
      }
      return absl::OkStatus();
    });
    EXPECT_TRUE(status.ok()) << status;
  }
  // The matrix covers both outcomes.
  EXPECT_GT(on, 0);
  EXPECT_GT(off, 0);
}

TEST(LightningModuleTest, NgcVersionStringDoesNotTurnTheFeatureOn) {
  for (const SimulatedBuild& sim : SimulatedBuilds()) {
    if (!sim.build.ok() || sim.build->version_string() != "1.10.0a0+ecc3718") continue;
    const FeatureDecision decision = Decide(sim);
    EXPECT_FALSE(decision.sharded_supported) << sim.name;
    EXPECT_FALSE(std::make_shared<Dense>(decision)->sharded_hooks_registered());
    EXPECT_THAT(decision.version_note, HasSubstr("1.10.0a0+ecc3718"));
    return;
  }
  FAIL() << "no simulated build reports 1.10.0a0+ecc3718";
}

TEST(LightningModuleTest, RealBuildRegistersHooksAndNamesAreChecked) {
  auto module = std::make_shared<Dense>(ShardedFeature());
  ASSERT_TRUE(module->sharded_hooks_registered()) << ShardedFeature().reason;
  simulate::SimulatedCluster cluster(2);
  absl::Status status = cluster.Run([&](simulate::RankContext& ctx) -> absl::Status {
    auto local = std::make_shared<Dense>(ShardedFeature());
    auto st = sharded::Zeros(sharded::ChunkShardingSpec::OnRanks(0, 2), {4}, {}, ctx.pg);
    EXPECT_EQ(local->RegisterShardedTensor("a.b", *st).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(local->RegisterShardedTensor("fc", *st).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(local->RegisterShardedTensor("t", *st).ok());
    EXPECT_EQ(local->RegisterShardedTensor("t", *st).code(), absl::StatusCode::kAlreadyExists);
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace shardlight::lightning
