// The Trainer end to end on the simulated cluster: 10 steps straight equal
// 5 steps + checkpoint + a fresh module resumed for 5 more, bit for bit on the
// same world size; on another world size the reloaded state equals the saved
// one and training continues.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lightning/trainer.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "simulate/embedding_mlp.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight {
namespace {

using lightning::Trainer;
using lightning::TrainerOptions;
using simulate::EmbeddingMlp;
using simulate::RankContext;
using simulate::SimulatedCluster;
using simulate::SyntheticRegression;

constexpr uint64_t kSeed = 17;

using sharded::checkpoint::testing::FreshDir;

// Everything a run ends with, as global tensors (rank 0's view).
struct Snapshot {
  std::vector<double> losses;
  std::vector<at::Tensor> dense;  // fc1/fc2 parameters
  at::Tensor table;               // the sharded table, gathered
};

absl::StatusOr<Snapshot> Train(RankContext& ctx, int64_t max_steps, const std::string& dir,
                               std::shared_ptr<lightning::Callback> callback = nullptr) {
  EmbeddingMlp module;
  TrainerOptions options;
  options.max_steps = max_steps;
  options.seed = kSeed;
  options.checkpoint_dir = dir;
  std::vector<std::shared_ptr<lightning::Callback>> callbacks;
  if (callback) callbacks.push_back(callback);
  Trainer trainer(options, callbacks);
  SyntheticRegression data(96, 32, kSeed);
  auto fit = trainer.Fit(module, data, ctx.pg);
  if (!fit.ok()) return fit.status();
  Snapshot snap;
  snap.losses = fit->losses;
  for (auto& p : module.parameters()) snap.dense.push_back(p.detach().clone());
  auto table = module.table()->FullTensor();
  if (!table.ok()) return table.status();
  snap.table = *table;
  return snap;
}

void ExpectEqualState(const Snapshot& a, const Snapshot& b) {
  ASSERT_EQ(a.dense.size(), b.dense.size());
  for (size_t i = 0; i < a.dense.size(); ++i) EXPECT_TRUE(at::equal(a.dense[i], b.dense[i])) << "dense " << i;
  EXPECT_TRUE(at::equal(a.table, b.table)) << "table";
}

TEST(TrainerResumeTest, ResumeOnTheSameWorldSizeIsBitExact) {
  const int w = 3;
  SimulatedCluster cluster(w);
  auto straight = cluster.Run([&](RankContext& ctx) { return Train(ctx, 10, ""); });
  ASSERT_TRUE(straight.ok()) << straight.status();
  const std::string dir = FreshDir("same_w");
  auto first = cluster.Run([&](RankContext& ctx) { return Train(ctx, 5, dir); });
  ASSERT_TRUE(first.ok()) << first.status();
  // New modules, new trainer, new process groups: only the checkpoint carries over.
  auto resumed = cluster.Run([&](RankContext& ctx) { return Train(ctx, 10, dir); });
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  const Snapshot& s = (*straight)[0];
  const Snapshot& r = (*resumed)[0];
  ASSERT_EQ(r.losses.size(), 5u) << "the resumed run must start at step 5";
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ((*first)[0].losses[i], s.losses[i]) << "step " << i + 1;
    EXPECT_EQ(r.losses[i], s.losses[5 + i]) << "step " << 6 + i;
  }
  ExpectEqualState(s, r);
  EXPECT_LT(s.losses.back(), s.losses.front()) << "the model should learn something";
}

// Issue 15, defect 9: files a save killed after its commit left behind go
// at the next resume, even when that run saves nothing (it has finished).
TEST(TrainerResumeTest, ResumeRemovesFilesTheCommittedIndexDoesNotReference) {
  namespace fs = std::filesystem;
  SimulatedCluster cluster(2);
  const std::string dir = FreshDir("leftovers");
  ASSERT_TRUE(cluster.Run([&](RankContext& ctx) { return Train(ctx, 4, dir); }).ok());
  std::string data_file;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("data-", 0) == 0) data_file = e.path().string();
  }
  ASSERT_FALSE(data_file.empty());
  const std::vector<std::string> leftovers = {"data-0123456789abcdef-r00000.safetensors",
                                              ".tmp-0123456789abcdef-index.json",
                                              ".tmp-0123456789abcdef-r00001.safetensors"};
  for (const std::string& name : leftovers) fs::copy_file(data_file, fs::path(dir) / name);
  std::ofstream(fs::path(dir) / "notes.txt") << "kept: not a name a save gives";
  auto rerun = cluster.Run([&](RankContext& ctx) { return Train(ctx, 4, dir); });
  ASSERT_TRUE(rerun.ok()) << rerun.status();
  for (const std::string& name : leftovers) EXPECT_FALSE(fs::exists(fs::path(dir) / name)) << name;
  EXPECT_TRUE(fs::exists(fs::path(dir) / "notes.txt"));
  EXPECT_TRUE(fs::exists(data_file));
  ASSERT_TRUE(cluster.Run([&](RankContext& ctx) { return Train(ctx, 6, dir); }).ok());  // still resumes
}

TEST(TrainerResumeTest, ResumeOnAnotherWorldSizeRestoresTheSavedState) {
  const std::string dir = FreshDir("other_w");
  SimulatedCluster four(4);
  auto saved = four.Run([&](RankContext& ctx) { return Train(ctx, 5, dir); });
  ASSERT_TRUE(saved.ok()) << saved.status();
  auto straight = four.Run([&](RankContext& ctx) { return Train(ctx, 10, ""); });
  ASSERT_TRUE(straight.ok()) << straight.status();
  for (int w : {2, 3}) {
    // Load only (max_steps = the saved step): the state must equal the saved one.
    SimulatedCluster cluster(w);
    auto loaded = cluster.Run([&](RankContext& ctx) { return Train(ctx, 5, dir); });
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_TRUE((*loaded)[0].losses.empty());
    ExpectEqualState((*saved)[0], (*loaded)[0]);
  }
  // And it continues: 5 more steps at W=2 land close to the straight W=4 run
  // (the dense gradient sums round differently across world sizes).
  const std::string dir2 = FreshDir("other_w_continue");
  std::filesystem::copy(dir, dir2, std::filesystem::copy_options::recursive |
                                       std::filesystem::copy_options::overwrite_existing);
  SimulatedCluster two(2);
  auto continued = two.Run([&](RankContext& ctx) { return Train(ctx, 10, dir2); });
  ASSERT_TRUE(continued.ok()) << continued.status();
  ASSERT_EQ((*continued)[0].losses.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR((*continued)[0].losses[i], (*straight)[0].losses[5 + i], 1e-4);
  EXPECT_TRUE(at::allclose((*continued)[0].table, (*straight)[0].table, 1e-4, 1e-5));
}

// A module whose own load hook counts the entries it sees; one rank's hook
// may fail.
struct HookedMlp : EmbeddingMlp {
  explicit HookedMlp(bool hook_fails) {
    AddLoadPreHook([this, hook_fails](torch::nn::Module&, sharded::StateDict& dict, const std::string&,
                                      lightning::LoadReport&) -> absl::Status {
      ++hook_calls;
      entries_seen = static_cast<int>(dict.entries().size());
      if (hook_fails) return absl::DataLossError("hook refused the state");
      return absl::OkStatus();
    });
  }
  int hook_calls = 0;
  int entries_seen = 0;
};

absl::StatusOr<std::pair<int, int>> FitHooked(RankContext& ctx, int64_t max_steps, const std::string& dir,
                                              bool hook_fails) {
  HookedMlp module(hook_fails);
  TrainerOptions options;
  options.max_steps = max_steps;
  options.seed = kSeed;
  options.checkpoint_dir = dir;
  SyntheticRegression data(96, 32, kSeed);
  auto fit = Trainer(options).Fit(module, data, ctx.pg);
  if (!fit.ok()) return fit.status();
  return std::make_pair(module.hook_calls, module.entries_seen);
}

TEST(TrainerResumeTest, ResumeRunsTheModulesLoadHooksOnEveryRank) {
  for (int w : {1, 2, 3}) {
    const std::string dir = FreshDir(absl::StrCat("hooks_", w));
    SimulatedCluster cluster(w);
    auto first = cluster.Run([&](RankContext& ctx) { return FitHooked(ctx, 2, dir, false); });
    ASSERT_TRUE(first.ok()) << first.status();
    for (const auto& [calls, seen] : *first) EXPECT_EQ(calls, 0) << "no checkpoint yet, no load";
    auto resumed = cluster.Run([&](RankContext& ctx) { return FitHooked(ctx, 3, dir, false); });
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    for (const auto& [calls, seen] : *resumed) {
      EXPECT_EQ(calls, 1) << "W=" << w;
      EXPECT_GT(seen, 0) << "the hook sees the model's entries";
    }
  }
}

TEST(TrainerResumeTest, OneRanksFailingLoadHookFailsTheResumeOnEveryRank) {
  for (int w : {2, 3}) {
    const std::string dir = FreshDir(absl::StrCat("failing_hook_", w));
    SimulatedCluster cluster(w);
    ASSERT_TRUE(cluster.Run([&](RankContext& ctx) { return FitHooked(ctx, 2, dir, false); }).ok());
    auto errors = cluster.Run([&](RankContext& ctx) -> std::string {
      auto fit = FitHooked(ctx, 3, dir, /*hook_fails=*/ctx.rank == w - 1);
      return fit.ok() ? "" : fit.status().ToString();
    });
    ASSERT_TRUE(errors.ok()) << errors.status();
    for (const std::string& e : *errors) {
      EXPECT_EQ(e, absl::StrCat("DATA_LOSS: resume failed on rank ", w - 1, ": hook refused the state"));
    }
  }
}

}  // namespace
}  // namespace shardlight
