// The Trainer with a checkpoint root (TrainerOptions::keep_last > 0): a
// checkpoint every N steps as step-<N>/, the last keep_last kept; a resume
// picks the newest good step and, when it fails verification, falls back to
// the one before (saying so) and still ends bit-exact with a straight run; a
// plain checkpoint from before keep_last was set resumes; a root with
// keep_last = 0 is refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lightning/trainer.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "simulate/embedding_mlp.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight {
namespace {

using lightning::FitResult;
using lightning::Trainer;
using lightning::TrainerOptions;
using simulate::EmbeddingMlp;
using simulate::RankContext;
using simulate::SimulatedCluster;
using simulate::SyntheticRegression;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kSeed = 23;

using sharded::checkpoint::testing::FreshDir;

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

struct Outcome {
  FitResult fit;
  std::vector<at::Tensor> dense;
  at::Tensor table;
};

absl::StatusOr<Outcome> Train(RankContext& ctx, int64_t max_steps, const std::string& dir, int every, int keep_last) {
  EmbeddingMlp module;
  TrainerOptions options;
  options.max_steps = max_steps;
  options.seed = kSeed;
  options.checkpoint_dir = dir;
  options.checkpoint_every = every;
  options.keep_last = keep_last;
  SyntheticRegression data(96, 32, kSeed);
  auto fit = Trainer(options).Fit(module, data, ctx.pg);
  if (!fit.ok()) return fit.status();
  Outcome run{*fit, {}, {}};
  for (auto& p : module.parameters()) run.dense.push_back(p.detach().clone());
  auto table = module.table()->FullTensor();
  if (!table.ok()) return table.status();
  run.table = *table;
  return run;
}

void FlipLastByte(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-1, std::ios::end);
  char c = 0;
  f.get(c);
  f.seekp(-1, std::ios::end);
  f.put(static_cast<char>(c ^ 0x21));
}

TEST(TrainerCheckpointRootTest, KeepsTheLastStepsAndFallsBackPastADamagedOne) {
  const int w = 2;
  SimulatedCluster cluster(w);
  auto straight = cluster.Run([&](RankContext& ctx) { return Train(ctx, 12, "", 0, 0); });
  ASSERT_TRUE(straight.ok()) << straight.status();

  const std::string root = FreshDir("root_fallback");
  auto first = cluster.Run([&](RankContext& ctx) { return Train(ctx, 8, root, 2, 2); });
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)[0].fit.checkpoints_saved, 4);
  EXPECT_THAT(Names(root), ElementsAre("latest", "step-000006", "step-000008"));

  // Damage the newest step: the resume falls back to step 6, says so, and
  // training from there ends where the straight run does.
  for (const std::string& name : Names(root + "/step-000008")) {
    if (absl::StartsWith(name, "data-")) FlipLastByte(root + "/step-000008/" + name);
  }
  ::testing::internal::CaptureStdout();
  auto resumed = cluster.Run([&](RankContext& ctx) { return Train(ctx, 12, root, 2, 2); });
  const std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_THAT(out, HasSubstr("resume: step 8"));
  EXPECT_THAT(out, HasSubstr("failed verification"));
  EXPECT_THAT(out, HasSubstr("falling back to step 6"));
  EXPECT_THAT(out, HasSubstr("resume: loaded step 6 from " + root + "/step-000006"));
  const Outcome& r = (*resumed)[0];
  EXPECT_EQ(r.fit.start_step, 6);
  EXPECT_EQ(r.fit.resumed_from, root + "/step-000006");
  ASSERT_EQ(r.fit.losses.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(r.fit.losses[i], (*straight)[0].fit.losses[6 + i]) << "step " << 7 + i;
  for (size_t i = 0; i < r.dense.size(); ++i) EXPECT_TRUE(at::equal(r.dense[i], (*straight)[0].dense[i]));
  EXPECT_TRUE(at::equal(r.table, (*straight)[0].table));
  EXPECT_THAT(Names(root), ElementsAre("latest", "step-000010", "step-000012"));

  // Another world size resumes from the newest step without a fallback.
  SimulatedCluster three(3);
  ::testing::internal::CaptureStdout();
  auto again = three.Run([&](RankContext& ctx) { return Train(ctx, 12, root, 2, 2); });
  const std::string quiet = ::testing::internal::GetCapturedStdout();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)[0].fit.start_step, 12);
  EXPECT_THAT(quiet, ::testing::Not(HasSubstr("falling back")));
}

// Issue 49: a `latest` that is a dangling link is a fallback, as a damaged
// step is: rank 0 says why, the newest committed step is resumed, and the
// next save makes `latest` a good pointer again.
TEST(TrainerCheckpointRootTest, ADanglingLatestFallsBackToTheNewestStep) {
  SimulatedCluster cluster(2);
  const std::string root = FreshDir("root_dangling_latest");
  ASSERT_TRUE(cluster.Run([&](RankContext& ctx) { return Train(ctx, 4, root, 2, 2); }).ok());
  std::filesystem::remove(root + "/latest");
  std::filesystem::create_symlink(root + "/no-such-file", root + "/latest");
  ::testing::internal::CaptureStdout();
  auto resumed = cluster.Run([&](RankContext& ctx) { return Train(ctx, 6, root, 2, 2); });
  const std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_THAT(out, HasSubstr("resume: broken 'latest' pointer '" + root + "/latest'"));
  EXPECT_THAT(out, HasSubstr("falling back to the newest committed step, 4"));
  EXPECT_THAT(out, HasSubstr("resume: loaded step 4 from " + root + "/step-000004"));
  EXPECT_EQ((*resumed)[0].fit.start_step, 4);
  EXPECT_FALSE(std::filesystem::is_symlink(root + "/latest"));
  EXPECT_THAT(Names(root), ElementsAre("latest", "step-000004", "step-000006"));
}

TEST(TrainerCheckpointRootTest, APlainCheckpointResumesIntoARoot) {
  const std::string dir = FreshDir("plain_then_root");
  SimulatedCluster cluster(2);
  ASSERT_TRUE(cluster.Run([&](RankContext& ctx) { return Train(ctx, 4, dir, 0, 0); }).ok());
  auto resumed = cluster.Run([&](RankContext& ctx) { return Train(ctx, 6, dir, 1, 1); });
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)[0].fit.start_step, 4);
  EXPECT_EQ((*resumed)[0].fit.resumed_from, dir);
  auto names = Names(dir);
  EXPECT_NE(std::find(names.begin(), names.end(), "step-000006"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "step-000005"), names.end()) << "keep_last 1";
  auto next = cluster.Run([&](RankContext& ctx) { return Train(ctx, 7, dir, 1, 1); });
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ((*next)[0].fit.start_step, 6) << "the root's latest wins over the older plain checkpoint";

  // The root with keep_last = 0 (one plain checkpoint): refused, nothing written.
  const auto before = Names(dir);
  auto refused = cluster.Run([&](RankContext& ctx) { return Train(ctx, 9, dir, 1, 0); });
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("'" + dir + "' is a checkpoint root"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("keep_last"));
  EXPECT_EQ(Names(dir), before);
}

}  // namespace
}  // namespace shardlight
