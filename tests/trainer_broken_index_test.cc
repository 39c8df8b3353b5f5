// Issue 28: a resume tells "no checkpoint" from "a checkpoint I cannot read".
// An index.json that is there but broken (each kind of checkpoint_testing's
// BrokenEntry) fails Fit on every rank, naming the entry and why, with every
// file as it was -- synchronous or background checkpoints, several world
// sizes; in a root such a step is passed over for the previous good one.
// Only a directory without an index starts over, and rank 0 says what the
// first save removes (how many files, why), as it does for every removal.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lightning/trainer.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "simulate/core/simulated_cluster.h"
#include "simulate/embedding_mlp.h"

namespace shardlight {
namespace {

namespace ckpt = sharded::checkpoint;
namespace ckpt_testing = sharded::checkpoint::testing;
using ckpt_testing::BrokenEntry;
using lightning::FitResult;
using lightning::Trainer;
using lightning::TrainerOptions;
using simulate::EmbeddingMlp;
using simulate::RankContext;
using simulate::SimulatedCluster;
using simulate::SyntheticRegression;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kSeed = 29;

struct RunSpec {
  std::string dir;
  int64_t max_steps = 4;
  int64_t every = 0;
  int keep_last = 0;
  bool async = false;
  std::shared_ptr<ckpt::Storage> storage;
};

// Fit on `world` ranks: every rank's outcome, and what the run printed.
std::vector<absl::StatusOr<FitResult>> FitOnEveryRank(int world, const RunSpec& run, std::string* printed) {
  std::vector<absl::StatusOr<FitResult>> per_rank(world, absl::UnknownError("not run"));
  ::testing::internal::CaptureStdout();
  SimulatedCluster cluster(world, ckpt_testing::Options());
  const absl::Status ran = cluster.Run([&](RankContext& ctx) -> absl::Status {
    EmbeddingMlp module;
    TrainerOptions options;
    options.max_steps = run.max_steps;
    options.seed = kSeed;
    options.checkpoint_dir = run.dir;
    options.checkpoint_every = run.every;
    options.keep_last = run.keep_last;
    options.async_checkpoint = run.async;
    options.async_staging_bytes = 64 << 10;
    options.groups = ctx.groups;
    options.save_options.storage = run.storage;
    SyntheticRegression data(96, 32, kSeed);
    per_rank[ctx.rank] = Trainer(options).Fit(module, data, ctx.pg);
    return absl::OkStatus();
  });
  *printed = ::testing::internal::GetCapturedStdout();
  EXPECT_TRUE(ran.ok()) << ran;
  return per_rank;
}

// Every rank succeeded and started at `start_step`.
void ExpectStartedAt(const std::vector<absl::StatusOr<FitResult>>& per_rank, int64_t start_step) {
  for (size_t r = 0; r < per_rank.size(); ++r) {
    ASSERT_TRUE(per_rank[r].ok()) << "rank " << r << ": " << per_rank[r].status();
    EXPECT_EQ(per_rank[r]->start_step, start_step) << "rank " << r;
  }
}

std::string TestName(BrokenEntry kind, int world, bool async) {
  return absl::StrCat(ckpt_testing::BrokenEntryName(kind), "_w", world, async ? "_async" : "");
}

// (world size, background checkpoints): synchronous saves on 1 and 3 ranks,
// background ones on 2.
const std::tuple<int, bool> kConfigs[] = {{1, false}, {3, false}, {2, true}};

// (kind, world size, background checkpoints)
using Param = std::tuple<BrokenEntry, std::tuple<int, bool>>;
std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const auto& [world, async] = std::get<1>(info.param);
  return TestName(std::get<0>(info.param), world, async);
}
const auto kEveryKindAndConfig =
    ::testing::Combine(::testing::ValuesIn(ckpt_testing::kBrokenEntries), ::testing::ValuesIn(kConfigs));

class BrokenIndexResumeTest : public ::testing::TestWithParam<Param> {};

// A plain checkpoint directory whose index is broken: Fit fails on every
// rank with the same error naming index.json and why; no file changed.
TEST_P(BrokenIndexResumeTest, PlainDirectoryFailsOnEveryRankAndKeepsEveryFile) {
  const auto& [kind, config] = GetParam();
  const auto& [world, async] = config;
  RunSpec run{ckpt_testing::FreshDir("plain_" + TestName(kind, world, async)), 4, 0, 0, false, nullptr};
  run.async = async;
  std::string printed;
  ExpectStartedAt(FitOnEveryRank(world, run, &printed), 0);
  const std::string index = ckpt::JoinPath(run.dir, ckpt::kIndexFileName);
  const std::string why = ckpt_testing::BreakEntry(index, kind);
  if (kind == BrokenEntry::kUnreadable) run.storage = ckpt_testing::UnreadableThrough(index);
  const auto before = ckpt_testing::DirectorySnapshot(run.dir);
  run.max_steps = 8;
  const auto per_rank = FitOnEveryRank(world, run, &printed);
  for (size_t r = 0; r < per_rank.size(); ++r) {
    ASSERT_FALSE(per_rank[r].ok()) << "rank " << r << " trained from step " << per_rank[r]->start_step;
    EXPECT_EQ(per_rank[r].status(), per_rank[0].status()) << "rank " << r;
    EXPECT_THAT(std::string(per_rank[r].status().message()), HasSubstr(index));
    EXPECT_THAT(std::string(per_rank[r].status().message()), HasSubstr(why));
  }
  std::cout << "  error: " << per_rank[0].status() << "\n";
  EXPECT_THAT(printed, Not(HasSubstr("removed")));
  EXPECT_EQ(ckpt_testing::DirectorySnapshot(run.dir), before) << "a refused resume changed the directory";
}

// In a root, a step whose index is broken is passed over: the resume falls
// back to the step before (rank 0 says why) and leaves the broken step as
// it was (a save replaces it only when training reaches its step).
TEST_P(BrokenIndexResumeTest, RootFallsBackToThePreviousGoodStep) {
  const auto& [kind, config] = GetParam();
  const auto& [world, async] = config;
  RunSpec run{ckpt_testing::FreshDir("root_" + TestName(kind, world, async)), 4, 2, 3, async, nullptr};
  std::string printed;
  ExpectStartedAt(FitOnEveryRank(world, run, &printed), 0);
  const std::string step4 = ckpt::JoinPath(run.dir, "step-000004");
  const std::string index = ckpt::JoinPath(step4, ckpt::kIndexFileName);
  const std::string why = ckpt_testing::BreakEntry(index, kind);
  if (kind == BrokenEntry::kUnreadable) run.storage = ckpt_testing::UnreadableThrough(index);
  const auto before = ckpt_testing::DirectorySnapshot(step4);
  run.max_steps = 3;  // saves step 3 only: step 4 stays as it is
  ExpectStartedAt(FitOnEveryRank(world, run, &printed), 2);
  EXPECT_THAT(printed, HasSubstr(absl::StrCat("resume: step 4 ('", step4, "') failed verification: ")));
  EXPECT_THAT(printed, HasSubstr(why));
  EXPECT_THAT(printed, HasSubstr("; falling back to step 2\n"));
  EXPECT_EQ(ckpt_testing::DirectorySnapshot(step4), before);
}

INSTANTIATE_TEST_SUITE_P(EveryKind, BrokenIndexResumeTest, kEveryKindAndConfig, ParamName);

class NoIndexResumeTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

// The one case that starts over: no index entry at all. The data files of
// the save that never committed go at the first save, which says so; a file
// a save never writes stays. Later saves say what they replace.
TEST_P(NoIndexResumeTest, StartsOverAndSaysWhatItRemoved) {
  const auto [world, async] = GetParam();
  RunSpec run{ckpt_testing::FreshDir(absl::StrCat("no_index_w", world, async ? "_async" : "")), 4, 0, 0, false, nullptr};
  run.async = async;
  std::string printed;
  ExpectStartedAt(FitOnEveryRank(world, run, &printed), 0);
  EXPECT_THAT(printed, Not(HasSubstr("removed"))) << "an empty directory holds nothing to remove";
  ASSERT_TRUE(std::filesystem::remove(ckpt::JoinPath(run.dir, ckpt::kIndexFileName)));
  std::ofstream(ckpt::JoinPath(run.dir, "notes.txt")) << "mine";
  ExpectStartedAt(FitOnEveryRank(world, run, &printed), 0);
  const std::string files = world == 1 ? "1 file" : absl::StrCat(world, " files");
  EXPECT_THAT(printed, HasSubstr(absl::StrCat("checkpoint: removed ", files, " in '", run.dir,
                                              "': the directory had no index (leftovers of a save that never "
                                              "committed)\n")));
  EXPECT_EQ(ckpt_testing::FileContents(ckpt::JoinPath(run.dir, "notes.txt")), "mine");
  run.max_steps = 6;
  ExpectStartedAt(FitOnEveryRank(world, run, &printed), 4);
  EXPECT_THAT(printed, HasSubstr(absl::StrCat("checkpoint: removed ", files, " in '", run.dir,
                                              "': the files of the checkpoint this save replaced\n")));
}

INSTANTIATE_TEST_SUITE_P(Worlds, NoIndexResumeTest, ::testing::ValuesIn(kConfigs),
                         [](const auto& info) {
                           return absl::StrCat("w", std::get<0>(info.param), std::get<1>(info.param) ? "_async" : "");
                         });

}  // namespace
}  // namespace shardlight
