// Issue 15, defect 8: a checkpoint records which run produced it, and a
// resume of another run's checkpoint is refused on every rank, saying what
// differs, unless asked for; the world size is not part of a run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <string>

#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/format/index.h"
#include "simulate/core/simulated_cluster.h"
#include "simulate/training_run.h"

namespace shardlight::simulate {
namespace {

using ::testing::HasSubstr;
namespace ckpt = sharded::checkpoint;

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

TrainingRunOptions Options(const std::string& dir, int world_size, int64_t steps, uint64_t seed) {
  TrainingRunOptions run;
  run.world_size = world_size;
  run.max_steps = steps;
  run.seed = seed;
  run.checkpoint_dir = dir;
  run.collective_timeout = std::chrono::seconds(20);
  return run;
}

// Every rank's error, in rank order (the cluster's error names only one).
std::vector<std::string> RankErrors(const TrainingRunOptions& run) {
  SimulatedCluster cluster(run.world_size);
  auto errors = cluster.Run([&](RankContext& ctx) -> std::string {
    auto r = TrainRank(run, ctx.pg);
    return r.ok() ? "" : std::string(r.status().message());
  });
  EXPECT_TRUE(errors.ok()) << errors.status();
  return errors.ok() ? *errors : std::vector<std::string>();
}

TEST(RunFingerprintTest, TheIndexRecordsTheRunButNotTheWorldSize) {
  TempDir a, b;
  ASSERT_TRUE(RunTraining(Options(a.path(), 2, 2, 7)).ok());
  ASSERT_TRUE(RunTraining(Options(b.path(), 3, 2, 7)).ok());
  auto ia = ckpt::ParseIndex(ckpt::testing::FileContents(a.path() + "/index.json"), "a");
  auto ib = ckpt::ParseIndex(ckpt::testing::FileContents(b.path() + "/index.json"), "b");
  ASSERT_TRUE(ia.ok() && ib.ok()) << ia.status() << ib.status();
  EXPECT_EQ(ia->run.at("seed"), "7");
  EXPECT_EQ(ia->run.at("lr"), "0.05");
  EXPECT_EQ(ia->run.at("batch_size"), "32");
  EXPECT_EQ(ia->run.at("structure").size(), 16u);
  EXPECT_EQ(ia->run, ib->run) << "the world size must not change the record";
}

TEST(RunFingerprintTest, AnotherRunsCheckpointIsRefusedOnEveryRankUntouched) {
  TempDir dir;
  ASSERT_TRUE(RunTraining(Options(dir.path(), 4, 4, 1)).ok());
  const std::string index = ckpt::testing::FileContents(dir.path() + "/index.json");
  // The example: another seed (and world size, which is allowed).
  TrainingRunOptions other = Options(dir.path(), 2, 8, 99);
  for (const std::string& e : RankErrors(other)) {
    EXPECT_THAT(e, HasSubstr("failed on rank 0: the checkpoint in '" + dir.path() +
                             "' is from a different run: seed 1 there, 99 here; resume it anyway with "
                             "allow_different_run"));
  }
  // Another learning rate, and another model (a different table).
  other = Options(dir.path(), 3, 8, 1);
  other.model.lr = 0.1;
  for (const std::string& e : RankErrors(other)) EXPECT_THAT(e, HasSubstr("different run: lr 0.05 there, 0.1 here"));
  other = Options(dir.path(), 3, 8, 1);
  other.model.vocab = 64;
  for (const std::string& e : RankErrors(other)) {
    EXPECT_THAT(e, HasSubstr("different run: model structure differs (key 'table': Float[96, 8] there, "
                             "Float[64, 8] here)"));
  }
  EXPECT_EQ(ckpt::testing::FileContents(dir.path() + "/index.json"), index) << "a refused resume changed the checkpoint";
}

// Issue 49: a background save records the run as a blocking one does, so
// another run's resume of an asynchronous checkpoint is refused as well.
TEST(RunFingerprintTest, AnAsynchronousCheckpointIsRefusedToAnotherRun) {
  TempDir root;
  TrainingRunOptions first = Options(root.path(), 2, 4, 1);
  first.keep_last = 2;
  first.async_checkpoint = true;
  ASSERT_TRUE(RunTraining(first).ok());
  TrainingRunOptions other = Options(root.path(), 2, 8, 1);
  other.keep_last = 2;
  other.model.lr = 0.1;
  SimulatedCluster cluster(other.world_size);
  // Each rank's status as a value (a Status result would end the run at the first).
  auto statuses = cluster.Run([&](RankContext& ctx) -> std::optional<absl::Status> {
    auto r = TrainRank(other, ctx.pg);
    return r.ok() ? absl::OkStatus() : r.status();
  });
  ASSERT_TRUE(statuses.ok()) << statuses.status();
  for (const std::optional<absl::Status>& s : *statuses) {
    EXPECT_EQ(s->code(), absl::StatusCode::kFailedPrecondition) << *s;
    EXPECT_THAT(std::string(s->message()), HasSubstr("different run: lr 0.05 there, 0.1 here"));
  }
}

TEST(RunFingerprintTest, AllowDifferentRunResumesAndRecordsTheNewRun) {
  TempDir dir;
  ASSERT_TRUE(RunTraining(Options(dir.path(), 2, 3, 1)).ok());
  TrainingRunOptions other = Options(dir.path(), 3, 5, 99);
  other.allow_different_run = true;
  auto resumed = RunTraining(other);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->ranks[0].start_step, 3);
  EXPECT_EQ(resumed->ranks[0].end_step, 5);
  auto index = ckpt::ParseIndex(ckpt::testing::FileContents(dir.path() + "/index.json"), "i");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->run.at("seed"), "99");
}

TEST(RunFingerprintTest, ACheckpointWithoutARecordResumes) {
  TempDir dir;
  ASSERT_TRUE(RunTraining(Options(dir.path(), 2, 3, 1)).ok());
  // As written before records existed: no "run" line.
  std::string text = ckpt::UnsealIndex(ckpt::testing::FileContents(dir.path() + "/index.json"));
  const size_t at = text.find(" \"run\": [");
  ASSERT_NE(at, std::string::npos);
  text.erase(at, text.find('\n', at) + 1 - at);
  WriteFile(dir.path() + "/index.json", ckpt::SealIndex(text));
  auto resumed = RunTraining(Options(dir.path(), 3, 5, 99));
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->ranks[0].start_step, 3);
}

TEST(RunFingerprintTest, ARerunOfAFinishedRunTrainsAndSavesNothing) {
  TempDir dir;
  ASSERT_TRUE(RunTraining(Options(dir.path(), 2, 4, 1)).ok());
  const std::string index = ckpt::testing::FileContents(dir.path() + "/index.json");
  for (int64_t steps : {4, 2}) {
    auto again = RunTraining(Options(dir.path(), 3, steps, 1));
    ASSERT_TRUE(again.ok()) << again.status();
    for (const RankSummary& s : again->ranks) {
      EXPECT_EQ(s.start_step, 4);
      EXPECT_EQ(s.end_step, 4);
      EXPECT_EQ(s.checkpoints_saved, 0);
    }
  }
  EXPECT_EQ(ckpt::testing::FileContents(dir.path() + "/index.json"), index);
}

}  // namespace
}  // namespace shardlight::simulate
