// State dicts of LightningModule trees on the simulated cluster: round trips,
// relayout, key reports, hooks, lifetime.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lightning/lightning_module.h"
#include "lightning/state_dict_hooks.h"
#include "lightning/test_modules.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using simulate::RankContext;
using simulate::SimulatedCluster;
using testing::MakeTree;
using testing::TreeModule;

ShardedContext ContextFor(RankContext& ctx, uint64_t seed) { return {ctx.pg, ctx.rank, ctx.world_size, seed}; }

// Every value of the module, sharded members as global tensors (collective).
absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> Values(torch::nn::Module& m) {
  auto dict = StateDictOf(m);
  if (!dict.ok()) return dict.status();
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [key, value] : dict->entries()) {
    if (auto* st = std::get_if<sharded::ShardedTensor>(&value)) {
      auto full = st->FullTensor();
      if (!full.ok()) return full.status();
      out.emplace_back(key, *full);
    } else {
      out.emplace_back(key, std::get<at::Tensor>(value).clone());
    }
  }
  return out;
}

absl::Status ExpectSameValues(const std::vector<std::pair<std::string, at::Tensor>>& a,
                              const std::vector<std::pair<std::string, at::Tensor>>& b) {
  if (a.size() != b.size()) return absl::InternalError(absl::StrCat(a.size(), " vs ", b.size(), " entries"));
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first) return absl::InternalError(absl::StrCat("key ", a[i].first, " vs ", b[i].first));
    if (!at::equal(a[i].second, b[i].second)) return absl::InternalError(absl::StrCat("values of ", a[i].first));
  }
  return absl::OkStatus();
}

class StateDictRoundTripTest : public ::testing::TestWithParam<int> {};

TEST_P(StateDictRoundTripTest, SaveFreshModuleLoadIsBitIdentical) {
  SimulatedCluster cluster(GetParam());
  absl::Status status = cluster.Run([](RankContext& ctx) -> absl::Status {
    auto saved = MakeTree(ContextFor(ctx, 11));
    if (!saved.ok()) return saved.status();
    auto dict = StateDictOf(**saved);
    if (!dict.ok()) return dict.status();
    // PyTorch's order: a module's own parameters and buffers, then its
    // children; the sharded hook appends the sharded members at the end.
    const std::vector<std::string> want = {"encoder.scale", "encoder.proj.weight", "encoder.proj.bias",
                                           "encoder.block.ff.weight", "encoder.block.ff.bias", "table",
                                           "encoder.keys", "encoder.block.weight"};
    if (dict->Keys() != want) return absl::InternalError("unexpected keys/order: " + absl::StrJoin(dict->Keys(), ","));
    auto fresh = MakeTree(ContextFor(ctx, 99));  // different values everywhere
    if (!fresh.ok()) return fresh.status();
    auto before = Values(**saved);
    auto other = Values(**fresh);
    if (ExpectSameValues(*before, *other).ok()) return absl::InternalError("fresh module equals saved");
    auto report = LoadStateDict(**fresh, *std::move(dict));
    if (!report.ok()) return report.status();
    if (!report->missing_keys.empty() || !report->unexpected_keys.empty()) return absl::InternalError("key report");
    auto after = Values(**fresh);
    return ExpectSameValues(*before, *after);
  });
  EXPECT_TRUE(status.ok()) << status;
}

// A different spec (other dims, an uneven grid) on the same world size:
// the pre-hook reshards the stored tensors into the module's layout.
TEST_P(StateDictRoundTripTest, LoadsIntoADifferentShardingSpec) {
  SimulatedCluster cluster(GetParam());
  absl::Status status = cluster.Run([](RankContext& ctx) -> absl::Status {
    auto saved = MakeTree(ContextFor(ctx, 5));
    auto target = MakeTree(ContextFor(ctx, 6), /*alt_layout=*/true);
    if (!saved.ok() || !target.ok()) return absl::InternalError("setup");
    const auto layout = (*target)->encoder->block->sharded_tensor("weight")->metadata().shards;
    auto report = LoadStateDict(**target, *StateDictOf(**saved));
    if (!report.ok()) return report.status();
    if (!((*target)->encoder->block->sharded_tensor("weight")->metadata().shards == layout)) {
      return absl::InternalError("the target's layout changed: it must keep its own spec");
    }
    return ExpectSameValues(*Values(**saved), *Values(**target));
  });
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, StateDictRoundTripTest, ::testing::Values(1, 2, 3, 4, 5, 8),
                         [](const auto& info) { return absl::StrCat("W", info.param); });

// Another world size: save at 4, consolidate (dense), load at 1, 3 and 8.
TEST(StateDictTest, LoadsAConsolidatedDictOnAnotherWorldSize) {
  std::vector<std::pair<std::string, at::Tensor>> consolidated;
  {
    SimulatedCluster four(4);
    auto values = four.Run([](RankContext& ctx) { return *Values(**MakeTree(ContextFor(ctx, 21))); });
    ASSERT_TRUE(values.ok()) << values.status();
    consolidated = (*values)[0];
  }
  for (int w : {1, 3, 8}) {
    SimulatedCluster cluster(w);
    absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
      auto target = MakeTree(ContextFor(ctx, 77), /*alt_layout=*/w == 3);
      if (!target.ok()) return target.status();
      sharded::StateDict dict;
      for (const auto& [k, v] : consolidated) dict.Set(k, v);
      auto report = LoadStateDict(**target, std::move(dict));
      if (!report.ok()) return report.status();
      return ExpectSameValues(consolidated, *Values(**target));
    });
    EXPECT_TRUE(status.ok()) << "W=" << w << ": " << status;
  }
}

TEST(StateDictTest, StrictAndNonStrictKeyReports) {
  SimulatedCluster cluster(2);
  absl::Status status = cluster.Run([](RankContext& ctx) -> absl::Status {
    auto module = MakeTree(ContextFor(ctx, 3));
    auto before = Values(**module);
    auto dict = *StateDictOf(**MakeTree(ContextFor(ctx, 4)));
    dict.Erase("encoder.scale");
    dict.Erase("encoder.keys");
    dict.Set("encoder.typo", at::ones({1}));
    auto strict = LoadStateDict(**module, dict, /*strict=*/true);
    if (strict.ok()) return absl::InternalError("strict load accepted missing keys");
    EXPECT_EQ(strict.status().message(),
              "strict load: missing keys: \"encoder.keys\", \"encoder.scale\"; unexpected keys: \"encoder.typo\"");
    // A failed load changes nothing.
    SL_RETURN_IF_ERROR(ExpectSameValues(*before, *Values(**module)));
    auto lenient = LoadStateDict(**module, dict, /*strict=*/false);
    if (!lenient.ok()) return lenient.status();
    EXPECT_THAT(lenient->missing_keys, ElementsAre("encoder.keys", "encoder.scale"));
    EXPECT_THAT(lenient->unexpected_keys, ElementsAre("encoder.typo"));
    // Sharded keys count as expected: "table" is loaded, not unexpected.
    EXPECT_THAT(lenient->loaded_keys, ::testing::Contains("table"));
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(StateDictTest, ShapeAndDtypeMismatchNameTheKeyAndChangeNothing) {
  SimulatedCluster cluster(3);
  absl::Status status = cluster.Run([](RankContext& ctx) -> absl::Status {
    auto module = MakeTree(ContextFor(ctx, 3));
    auto before = Values(**module);
    auto good = *StateDictOf(**MakeTree(ContextFor(ctx, 8)));

    auto dense_shape = good;
    dense_shape.Set("encoder.proj.weight", at::zeros({4, 7}));
    EXPECT_THAT(std::string(LoadStateDict(**module, dense_shape).status().message()),
                HasSubstr("size mismatch for key \"encoder.proj.weight\": the state dict has [4, 7], the module has [4, 6]"));
    auto dense_dtype = good;
    dense_dtype.Set("encoder.scale", at::ones({4}, at::kDouble));
    EXPECT_THAT(std::string(LoadStateDict(**module, dense_dtype).status().message()),
                HasSubstr("dtype mismatch for key \"encoder.scale\": the state dict has Double, the module has Float"));
    auto sharded_shape = good;
    sharded_shape.Set("encoder.keys", at::zeros({7, 6}));
    EXPECT_THAT(std::string(LoadStateDict(**module, sharded_shape).status().message()),
                HasSubstr("size mismatch for key \"encoder.keys\": the state dict has [7, 6], the module has [7, 5]"));
    auto sharded_into_dense = good;
    sharded_into_dense.Set("encoder.scale", *(*module)->sharded_tensor("table"));
    EXPECT_THAT(std::string(LoadStateDict(**module, sharded_into_dense).status().message()),
                HasSubstr("key \"encoder.scale\" holds a sharded tensor"));
    return ExpectSameValues(*before, *Values(**module));
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(StateDictTest, HooksRunWithPrefixesAndAreRemovable) {
  auto root = std::make_shared<LightningModule>();
  auto child = root->register_module("child", std::make_shared<ShardedModule>());
  std::vector<std::string> prefixes;
  HookHandle handle = child->AddStateDictHook([&](torch::nn::Module&, StateDict& d, const std::string& prefix) {
    prefixes.push_back(prefix);
    return d.Insert(prefix + "extra", at::ones({1}));
  });
  EXPECT_TRUE(StateDictOf(*root)->Contains("child.extra"));
  EXPECT_THAT(prefixes, ElementsAre("child."));
  handle.Remove();
  handle.Remove();  // idempotent
  EXPECT_FALSE(StateDictOf(*root)->Contains("child.extra"));
  EXPECT_EQ(child->num_state_dict_hooks(), 0u);
  // A hook error stops the state dict and is returned as is.
  child->AddLoadPreHook([](torch::nn::Module&, StateDict&, const std::string&, LoadReport&) {
    return absl::DataLossError("pre-hook refused");
  });
  EXPECT_EQ(LoadStateDict(*root, *StateDictOf(*root)).status().message(), "pre-hook refused");
}

// A LightningModule inside another: each member is saved once (by the hooks
// of the innermost LightningModule above it) and a strict load round-trips.
TEST(StateDictTest, NestedLightningModulesSaveEachMemberOnce) {
  SimulatedCluster cluster(2);
  absl::Status status = cluster.Run([](RankContext& ctx) -> absl::Status {
    auto build = [&](uint64_t seed) -> absl::StatusOr<std::shared_ptr<TreeModule>> {
      SL_ASSIGN_OR_RETURN(auto outer, MakeTree(ContextFor(ctx, seed)));
      SL_ASSIGN_OR_RETURN(auto inner, MakeTree(ContextFor(ctx, seed + 50)));
      outer->register_module("inner", inner);
      return outer;
    };
    SL_ASSIGN_OR_RETURN(auto saved, build(1));
    SL_ASSIGN_OR_RETURN(auto fresh, build(2));
    SL_ASSIGN_OR_RETURN(auto dict, StateDictOf(*saved));
    if (!dict.Contains("inner.table") || !dict.Contains("inner.encoder.block.weight") || !dict.Contains("table")) {
      return absl::InternalError("missing keys: " + absl::StrJoin(dict.Keys(), ","));
    }
    SL_ASSIGN_OR_RETURN(auto report, LoadStateDict(*fresh, dict, /*strict=*/true));
    if (!report.missing_keys.empty() || !report.unexpected_keys.empty()) return absl::InternalError("key report");
    return ExpectSameValues(*Values(*saved), *Values(*fresh));
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(StateDictTest, AHookMayRemoveItselfWhileRunning) {
  auto root = std::make_shared<LightningModule>();
  int runs = 0;
  auto handle = std::make_shared<HookHandle>();
  *handle = root->AddStateDictHook([&runs, handle](torch::nn::Module&, StateDict&, const std::string&) {
    ++runs;
    handle->Remove();
    return absl::OkStatus();
  });
  ASSERT_TRUE(StateDictOf(*root).ok());
  ASSERT_TRUE(StateDictOf(*root).ok());
  EXPECT_EQ(runs, 1);
}

TEST(StateDictTest, HooksDoNotKeepTheModuleAlive) {
  std::weak_ptr<LightningModule> weak;
  HookHandle handle;
  {
    auto module = std::make_shared<TreeModule>();
    ASSERT_TRUE(module->sharded_hooks_registered()) << module->gate().reason;
    handle = module->AddStateDictHook([](torch::nn::Module&, StateDict&, const std::string&) {
      return absl::OkStatus();
    });
    weak = module;
  }
  EXPECT_TRUE(weak.expired()) << "a hook kept its LightningModule alive";
  handle.Remove();  // the host is gone: harmless
}

}  // namespace
}  // namespace shardlight::lightning
