// ModelCheckpoint(monitor, mode, save_top_k) in the Trainer (issue 46, item
// 4; lightning/model_checkpoint.h): the ranking follows Lightning's rule
// (strictly better than the k-th enters, ties do not, the earliest of tied
// worst goes, NaN as +/-inf while room is left); the checkpoint root keeps
// exactly the best k validated steps plus `latest` at W = 1..3 (every rank
// ranks alike, rank 0 deletes); a resume continues the same ranking (the
// kept steps and best_k_models equal the uninterrupted run's); a monitor
// that ValidationStep does not log, and each conflicting option, fail every
// rank before the first step, naming it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lightning/model_checkpoint.h"
#include "lightning/trainer.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/roots/checkpoint_root.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "simulate/core/simulated_cluster.h"
#include "simulate/embedding_mlp.h"

namespace shardlight {
namespace {

using lightning::FitResult;
using lightning::ModelCheckpoint;
using simulate::RankContext;
using simulate::SimulatedCluster;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Ranking = std::vector<std::pair<int64_t, double>>;

constexpr uint64_t kSeed = 5;
constexpr int64_t kVocab = 40;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// The score each validation logs, by the step it follows (index 0: the sanity pass).
const std::vector<double> kScores = {9, 5, 3, 4, 3, 1, 7, 2, 2};

// Logs "score" = kScores[step]: rank 0's part is the whole value, the
// others' 0, so the reduced sum is exact at every world size.
class ScoredMlp : public simulate::EmbeddingMlp {
 public:
  ScoredMlp() : EmbeddingMlp([] {
    simulate::EmbeddingMlpOptions o;
    o.vocab = kVocab;
    return o;
  }()) {}
  absl::StatusOr<lightning::ValidationLog> ValidationStep(const lightning::Batch&,
                                                          const lightning::StepContext& ctx) override {
    const double score = ctx.rank == 0 ? kScores.at(static_cast<size_t>(ctx.step)) : 0.0;
    return lightning::ValidationLog{{"score", at::full({}, score, at::kDouble)}};
  }
};

std::shared_ptr<ModelCheckpoint> Make(const std::string& monitor, const std::string& mode, int64_t k) {
  auto mc = ModelCheckpoint::Create({monitor, mode, k});
  EXPECT_TRUE(mc.ok()) << mc.status();
  return mc.ok() ? *mc : nullptr;
}

Ranking Rank(ModelCheckpoint& mc, const std::vector<double>& scores) {
  mc.Bind(100, 1);
  for (size_t i = 0; i < scores.size(); ++i) {
    EXPECT_TRUE(mc.OnValidationEnd({}, static_cast<int64_t>(i + 1), {{"m", scores[i]}}).ok());
  }
  return mc.best_k_models();
}

TEST(ModelCheckpointTest, RanksAsLightningDoes) {
  // k = 2, min, steps 1..8: 5, 3 enter; 4 beats the k-th (5) and replaces it;
  // 3 beats the k-th (4); 1 replaces the earliest of the tied 3s (step 2);
  // 7 does not enter; 2 replaces the other 3 (step 4); the second 2 ties the
  // k-th (2) and does not enter.
  EXPECT_EQ(Rank(*Make("m", "min", 2), {5, 3, 4, 3, 1, 7, 2, 2}), (Ranking{{5, 1}, {7, 2}}));
  // Ties at the k-th never enter: the first k stay.
  EXPECT_EQ(Rank(*Make("m", "min", 2), {1, 1, 1, 1}), (Ranking{{1, 1}, {2, 1}}));
  EXPECT_EQ(Rank(*Make("m", "max", 2), {1, 1, 2, 2, 2}), (Ranking{{3, 2}, {4, 2}}));
  // The replaced one is the earliest entered among the tied worst.
  EXPECT_EQ(Rank(*Make("m", "min", 3), {4, 2, 4, 3}), (Ranking{{2, 2}, {3, 4}, {4, 3}}));
  // NaN: ranked +inf while there is room, never better than the k-th.
  const Ranking nan = Rank(*Make("m", "min", 2), {kNaN, 2, kNaN, 1});
  EXPECT_EQ(nan, (Ranking{{2, 2}, {4, 1}}));
  const Ranking nan_max = Rank(*Make("m", "max", 3), {kNaN, 2});
  EXPECT_EQ(nan_max[0].second, -std::numeric_limits<double>::infinity());
  // -1 keeps all, 0 none.
  EXPECT_EQ(Rank(*Make("m", "min", -1), {3, 2, 1}).size(), 3u);
  EXPECT_TRUE(Rank(*Make("m", "min", 0), {3, 2, 1}).empty());
  auto mc = Make("m", "max", 2);
  Rank(*mc, {1, 5, 3});
  EXPECT_EQ(mc->best_model_step(), 2);
  EXPECT_THAT(mc->BestSteps(), ElementsAre(2, 3));
  // Bad options.
  for (const lightning::ModelCheckpointOptions& bad :
       {lightning::ModelCheckpointOptions{"", "min", 1}, lightning::ModelCheckpointOptions{"m", "low", 1},
        lightning::ModelCheckpointOptions{"m", "min", -2}}) {
    EXPECT_EQ(ModelCheckpoint::Create(bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

absl::StatusOr<FitResult> Fit(RankContext& ctx, lightning::TrainerOptions options,
                              std::vector<std::shared_ptr<lightning::Callback>> callbacks) {
  ScoredMlp module;
  options.seed = kSeed;
  options.limit_val_batches = 1;
  simulate::SyntheticRegression train(kVocab, 4, kSeed);
  simulate::SyntheticRegression val(kVocab, 4, kSeed + 1);
  return lightning::Trainer(options, std::move(callbacks)).Fit(module, train, val, ctx.pg);
}

// The committed steps in the root and the step `latest` names.
std::pair<std::vector<int64_t>, int64_t> OnDisk(const std::string& root) {
  auto listing = sharded::checkpoint::ScanCheckpointRoot(root, sharded::checkpoint::StorageOrDefault(nullptr));
  EXPECT_TRUE(listing.ok()) << listing.status();
  std::vector<int64_t> steps;
  if (!listing.ok()) return {steps, -1};
  for (const auto& s : listing->steps) {
    if (s.committed) steps.push_back(s.step);
  }
  return {steps, listing->latest.value_or(-1)};
}

struct FitRun {
  std::vector<Ranking> rankings;  // per rank
  std::vector<FitResult> results;
};

FitRun FitAt(int world, const std::string& dir, int64_t max_steps, const std::string& mode, int64_t k,
          int64_t checkpoint_every = 0) {
  SimulatedCluster cluster(world);
  lightning::TrainerOptions options;
  options.max_steps = max_steps;
  options.val_check_interval = 1;
  options.checkpoint_dir = dir;
  options.checkpoint_every = checkpoint_every;
  FitRun run;
  run.rankings.resize(world);
  std::vector<std::shared_ptr<ModelCheckpoint>> mcs(world);
  auto got = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<FitResult> {
    mcs[ctx.rank] = Make("score", mode, k);
    return Fit(ctx, options, {mcs[ctx.rank]});
  });
  EXPECT_TRUE(got.ok()) << got.status();
  if (got.ok()) run.results = *got;
  for (int r = 0; r < world; ++r) run.rankings[r] = mcs[r]->best_k_models();
  return run;
}

TEST(ModelCheckpointTest, TheRootKeepsTheBestStepsAndLatestAtEveryWorldSize) {
  for (int w = 1; w <= 3; ++w) {
    // Scores after steps 1..8: 5 3 4 3 1 7 2 2 -> best two (min): steps 5 (1), 7 (2).
    const std::string dir = sharded::checkpoint::testing::FreshDir(absl::StrCat("mc_min_", w));
    const FitRun run = FitAt(w, dir, 8, "min", 2);
    for (int r = 0; r < w; ++r) EXPECT_EQ(run.rankings[r], (Ranking{{5, 1}, {7, 2}})) << "W=" << w << " rank " << r;
    EXPECT_EQ(OnDisk(dir), (std::pair<std::vector<int64_t>, int64_t>{{5, 7, 8}, 8})) << "W=" << w;
    // max, k 3: 5 7 4 enter... best three (max): steps 6 (7), 1 (5), 3 (4); the end save (8) is `latest`.
    const std::string max_dir = sharded::checkpoint::testing::FreshDir(absl::StrCat("mc_max_", w));
    const FitRun max_run = FitAt(w, max_dir, 8, "max", 3);
    for (int r = 0; r < w; ++r) {
      EXPECT_EQ(max_run.rankings[r], (Ranking{{1, 5}, {3, 4}, {6, 7}})) << "W=" << w << " rank " << r;
    }
    EXPECT_EQ(OnDisk(max_dir), (std::pair<std::vector<int64_t>, int64_t>{{1, 3, 6, 8}, 8})) << "W=" << w;
  }
}

TEST(ModelCheckpointTest, AResumeContinuesTheSameRanking) {
  const std::string whole = sharded::checkpoint::testing::FreshDir("mc_whole");
  const FitRun want = FitAt(2, whole, 8, "min", 2);
  // Interrupted after step 4 (kept: 2 (3), 4 (3); `latest` 4), resumed at W = 3 to 8.
  const std::string parts = sharded::checkpoint::testing::FreshDir("mc_parts");
  const FitRun first = FitAt(2, parts, 4, "min", 2);
  EXPECT_EQ(first.rankings[0], (Ranking{{2, 3}, {4, 3}}));
  EXPECT_EQ(OnDisk(parts), (std::pair<std::vector<int64_t>, int64_t>{{2, 4}, 4}));
  const FitRun second = FitAt(3, parts, 8, "min", 2);
  ASSERT_FALSE(second.results.empty());
  EXPECT_EQ(second.results[0].start_step, 4);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(second.rankings[r], want.rankings[0]) << "rank " << r;
  EXPECT_EQ(OnDisk(parts), OnDisk(whole));
}

TEST(ModelCheckpointTest, BadSetupFailsEveryRankBeforeTheFirstStep) {
  const auto expect_all = [](int world, lightning::TrainerOptions options, const std::string& monitor,
                             const std::string& want) {
    SimulatedCluster cluster(world);
    std::vector<absl::Status> statuses(world);
    auto got = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<FitResult> {
      auto result = Fit(ctx, options, {Make(monitor, "min", 2)});
      statuses[ctx.rank] = result.status();
      return result;
    });
    EXPECT_FALSE(got.ok()) << want;
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(statuses[r].code(), absl::StatusCode::kInvalidArgument) << want << " rank " << r;
      EXPECT_THAT(std::string(statuses[r].message()), HasSubstr(want)) << "rank " << r;
    }
  };
  lightning::TrainerOptions options;
  options.max_steps = 4;
  options.val_check_interval = 1;
  options.checkpoint_dir = sharded::checkpoint::testing::FreshDir("mc_bad");
  // A monitor that no ValidationStep logs: the sanity pass, before step 1.
  expect_all(3, options, "val_loss", "monitor 'val_loss' is not logged by ValidationStep (it logs: score)");
  EXPECT_EQ(OnDisk(options.checkpoint_dir).first, std::vector<int64_t>{}) << "nothing trained or saved";
  lightning::TrainerOptions keep = options;
  keep.keep_last = 2;
  expect_all(2, keep, "score", "and keep_last (2) both choose");
  lightning::TrainerOptions no_dir = options;
  no_dir.checkpoint_dir.clear();
  expect_all(2, no_dir, "score", "needs checkpoint_dir");
  lightning::TrainerOptions async = options;
  async.async_checkpoint = true;
  expect_all(2, async, "score", "with async_checkpoint is not supported");
  // Two of them.
  SimulatedCluster cluster(2);
  auto two = cluster.Run([&](RankContext& ctx) { return Fit(ctx, options, {Make("score", "min", 1), Make("score", "max", 1)}); });
  ASSERT_FALSE(two.ok());
  EXPECT_THAT(std::string(two.status().message()), HasSubstr("two ModelCheckpoints"));
  // Without a validation source.
  auto unvalidated = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<FitResult> {
    ScoredMlp module;
    simulate::SyntheticRegression train(kVocab, 4, kSeed);
    return lightning::Trainer(options, {Make("score", "min", 1)}).Fit(module, train, ctx.pg);
  });
  ASSERT_FALSE(unvalidated.ok());
  EXPECT_THAT(std::string(unvalidated.status().message()), HasSubstr("needs validation"));
}

}  // namespace
}  // namespace shardlight
