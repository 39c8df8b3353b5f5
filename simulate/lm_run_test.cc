// The LM job on thread-ranks (a small GPT for speed): the same losses on
// 1x1 and 2x2; a 2x2 checkpoint resumed on 1x3 and 4x1 continues with the
// uninterrupted run's losses; bad input -- a TP size that does not divide the
// heads or the MLP, a vocabulary smaller than TP, a missing or empty corpus,
// a checkpoint of another model shape -- fails on every rank before training.
#include "simulate/lm_run.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "simulate/core/simulated_cluster.h"
#include "simulate/training_run.h"

namespace shardlight::simulate {
namespace {

using ::testing::HasSubstr;

LmJobOptions Small() {
  LmJobOptions job;
  job.model.dim = 48;
  job.model.heads = 12;
  job.model.mlp_hidden = 96;
  job.model.layers = 2;
  job.model.context = 32;
  job.batch = 6;
  job.steps = 6;
  job.eval_batches = 1;
  return job;
}

// Every rank's result (or every rank's error, rank order).
struct Outcome {
  std::vector<absl::StatusOr<LmRankResult>> ranks;
};

Outcome RunLm(LmJobOptions job, std::vector<int64_t> shape) {
  job.mesh_shape = shape;
  const int world = static_cast<int>(shape[0] * shape[1]);
  SimulatedCluster cluster(world);
  Outcome out;
  out.ranks.resize(world, absl::UnknownError("not run"));
  const absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    sharded::mesh::MeshContext mesh;
    mesh.store = ctx.store;
    mesh.rank = ctx.rank;
    mesh.world_size = ctx.world_size;
    mesh.world = ctx.pg;
    out.ranks[ctx.rank] = RunLmRank(job, mesh);
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

double RelDiff(double a, double b) { return std::abs(a - b) / std::abs(b); }

TEST(LmRunTest, MeshesTrainTheSameAndResumeOnOtherMeshes) {
  TempDir dir;
  LmJobOptions job = Small();
  const Outcome single = RunLm(job, {1, 1});
  ASSERT_TRUE(single.ranks[0].ok()) << single.ranks[0].status();
  job.checkpoint_dir = dir.path();
  job.save_at = 3;
  const Outcome mesh = RunLm(job, {2, 2});
  for (const auto& r : mesh.ranks) ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<double>& want = single.ranks[0]->losses;
  const std::vector<double>& got = mesh.ranks[0]->losses;
  ASSERT_EQ(got.size(), 6u);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_LT(RelDiff(got[i], want[i]), 1e-5) << "step " << i;
  EXPECT_LT(got.back(), got.front());  // it learns
  EXPECT_NEAR(std::log(256.0), got.front(), 0.1);  // a fresh model is near uniform
  EXPECT_GT(mesh.ranks[0]->eval_perplexity, 1.0);
  for (const auto& shape : {std::vector<int64_t>{1, 3}, std::vector<int64_t>{4, 1}}) {
    const Outcome resumed = RunLm(job, shape);
    for (const auto& r : resumed.ranks) {
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->start_step, 3);
      ASSERT_EQ(r->losses.size(), 3u);
      for (size_t i = 0; i < 3; ++i) {
        EXPECT_LT(RelDiff(r->losses[i], got[3 + i]), 1e-5) << shape[0] << "x" << shape[1] << " step " << 3 + i;
      }
    }
  }
}

void ExpectEveryRankFails(const Outcome& outcome, const std::string& text) {
  for (size_t r = 0; r < outcome.ranks.size(); ++r) {
    ASSERT_FALSE(outcome.ranks[r].ok()) << "rank " << r << " trained";
    EXPECT_THAT(std::string(outcome.ranks[r].status().message()), HasSubstr(text)) << "rank " << r;
  }
}

TEST(LmRunTest, BadInputFailsOnEveryRank) {
  LmJobOptions job = Small();
  job.model.heads = 6;
  ExpectEveryRankFails(RunLm(job, {1, 4}), "tensor-parallel size 4 does not divide the 6 attention heads");
  job = Small();
  job.model.mlp_hidden = 90;
  ExpectEveryRankFails(RunLm(job, {1, 4}), "does not divide the MLP hidden size 90");
  job = Small();
  job.model.vocab = 3;
  ExpectEveryRankFails(RunLm(job, {1, 4}), "a vocabulary of 3 cannot be split over 4");
  job = Small();
  job.corpus = "/nonexistent/corpus.txt";
  ExpectEveryRankFails(RunLm(job, {2, 1}), "corpus '/nonexistent/corpus.txt' is missing");
  TempDir dir;
  job.corpus = dir.path() + "/empty.txt";
  std::ofstream(job.corpus).close();
  ExpectEveryRankFails(RunLm(job, {2, 1}), "holds 0 bytes");
}

TEST(LmRunTest, CheckpointOfAnotherModelShapeFailsOnEveryRank) {
  TempDir dir;
  LmJobOptions job = Small();
  job.steps = 1;
  job.checkpoint_dir = dir.path();
  const Outcome saved = RunLm(job, {2, 1});
  ASSERT_TRUE(saved.ranks[0].ok()) << saved.ranks[0].status();
  job.steps = 2;
  job.model.dim = 24;  // another shape, same keys
  ExpectEveryRankFails(RunLm(job, {1, 2}), "model.");
}

}  // namespace
}  // namespace shardlight::simulate
