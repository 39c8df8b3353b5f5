// The Trainer with TrainerOptions::async_checkpoint: checkpoints written in
// the background hold the state of their step (a resume from them ends
// bit-exact with a straight run) and the same bytes as synchronous ones;
// callbacks see each save start and, later, commit (at a step boundary once
// every rank's save has ended); Fit returns once the last
// save is committed; a background save that fails fails Fit on every rank
// with the failing rank's error and leaves the previous step as `latest`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lightning/trainer.h"
#include "sharded/agreement.h"
#include "sharded/checkpoint/roots/checkpoint_root.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/storage/fault_injecting_storage.h"
#include "simulate/core/simulated_cluster.h"
#include "simulate/embedding_mlp.h"

namespace shardlight {
namespace {

namespace ckpt = sharded::checkpoint;
using lightning::Callback;
using lightning::FitResult;
using lightning::Trainer;
using lightning::TrainerOptions;
using lightning::TrainState;
using simulate::EmbeddingMlp;
using simulate::RankContext;
using simulate::SimulatedCluster;
using simulate::SyntheticRegression;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kSeed = 31;

using sharded::checkpoint::testing::FileContents;
using sharded::checkpoint::testing::FreshDir;

// The data files of a checkpoint directory, by name order (rank order).
std::vector<std::string> DataFiles(const std::string& dir) {
  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (absl::StartsWith(e.path().filename().string(), "data-")) paths.push_back(e.path());
  }
  // "data-<generation>-r<rank>.safetensors": by rank.
  auto rank_part = [](const std::filesystem::path& p) {
    const std::string name = p.filename().string();
    return name.substr(name.rfind('-'));
  };
  std::sort(paths.begin(), paths.end(), [&](const auto& a, const auto& b) { return rank_part(a) < rank_part(b); });
  std::vector<std::string> out;
  for (const auto& p : paths) out.push_back(FileContents(p.string()));
  return out;
}

class Recorder : public Callback {
 public:
  absl::Status OnSaveStarted(const TrainState&, int64_t step, const std::string&) override {
    events.push_back(absl::StrCat("started ", step));
    return absl::OkStatus();
  }
  absl::Status OnSaveCheckpoint(const TrainState&, int64_t step, const std::string& dir) override {
    events.push_back(absl::StrCat("committed ", step));
    // Committed means loadable: the index is in place when the hook runs.
    if (!ckpt::HasCommittedCheckpoint(dir)) return absl::InternalError(absl::StrCat(dir, " is not committed"));
    return absl::OkStatus();
  }
  std::vector<std::string> events;
};

struct Outcome {
  FitResult fit;
  std::vector<std::string> events;
  std::vector<at::Tensor> dense;
  at::Tensor table;
};

absl::StatusOr<Outcome> Train(RankContext& ctx, int64_t max_steps, const std::string& root, bool async,
                              std::shared_ptr<ckpt::Storage> storage = nullptr) {
  EmbeddingMlp module;
  TrainerOptions options;
  options.max_steps = max_steps;
  options.seed = kSeed;
  options.checkpoint_dir = root;
  options.checkpoint_every = root.empty() ? 0 : 2;
  options.keep_last = 2;
  options.async_checkpoint = async;
  options.async_staging_bytes = 64 << 10;  // below the state of rank 0: Save writes part of it
  options.groups = ctx.groups;
  options.save_options.storage = std::move(storage);
  auto recorder = std::make_shared<Recorder>();
  SyntheticRegression data(96, 32, kSeed);
  auto fit = Trainer(options, {recorder}).Fit(module, data, ctx.pg);
  if (!fit.ok()) return fit.status();
  Outcome run{*fit, recorder->events, {}, {}};
  for (auto& p : module.parameters()) run.dense.push_back(p.detach().clone());
  auto table = module.table()->FullTensor();
  if (!table.ok()) return table.status();
  run.table = *table;
  return run;
}

TEST(TrainerAsyncCheckpointTest, ResumesBitExactAndWritesTheBytesOfASynchronousSave) {
  SimulatedCluster cluster(3);
  auto straight = cluster.Run([&](RankContext& ctx) { return Train(ctx, 12, "", false); });
  ASSERT_TRUE(straight.ok()) << straight.status();

  const std::string sync_root = FreshDir("sync_root");
  const std::string async_root = FreshDir("async_root");
  auto sync_run = cluster.Run([&](RankContext& ctx) { return Train(ctx, 8, sync_root, false); });
  ASSERT_TRUE(sync_run.ok()) << sync_run.status();
  auto first = cluster.Run([&](RankContext& ctx) { return Train(ctx, 8, async_root, true); });
  ASSERT_TRUE(first.ok()) << first.status();
  for (const Outcome& rank : *first) {
    EXPECT_EQ(rank.fit.checkpoints_saved, 4);
    EXPECT_THAT(rank.events, ElementsAre("started 2", "committed 2", "started 4", "committed 4", "started 6",
                                         "committed 6", "started 8", "committed 8"));
  }
  // Same bytes as the synchronous run's checkpoints, step by step.
  for (const char* step : {"step-000006", "step-000008"}) {
    const auto sync_files = DataFiles(sync_root + "/" + step);
    const auto async_files = DataFiles(async_root + "/" + step);
    ASSERT_EQ(sync_files.size(), 3u) << step;
    EXPECT_TRUE(sync_files == async_files) << step;
  }

  // A resume from the async root ends where the straight run does.
  auto resumed = cluster.Run([&](RankContext& ctx) { return Train(ctx, 12, async_root, true); });
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  const Outcome& r = (*resumed)[0];
  EXPECT_EQ(r.fit.start_step, 8);
  ASSERT_EQ(r.fit.losses.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r.fit.losses[i], (*straight)[0].fit.losses[8 + i]) << "step " << 9 + i;
  for (size_t i = 0; i < r.dense.size(); ++i) EXPECT_TRUE(at::equal(r.dense[i], (*straight)[0].dense[i]));
  EXPECT_TRUE(at::equal(r.table, (*straight)[0].table));
}

TEST(TrainerAsyncCheckpointTest, AFailedBackgroundSaveFailsFitOnEveryRankAndKeepsThePreviousStep) {
  constexpr int kFaulty = 2;
  const std::string root = FreshDir("async_fault");
  SimulatedCluster cluster(3);
  const auto start = std::chrono::steady_clock::now();
  auto failed = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<Outcome> {
    std::shared_ptr<ckpt::Storage> storage;
    if (ctx.rank == kFaulty) {
      // The data file of step 4 cannot be made durable.
      storage = std::make_shared<ckpt::FaultInjectingStorage>(
          ckpt::PosixStorage(), [](ckpt::StorageOp op, const std::string& path) -> absl::Status {
            if (op == ckpt::StorageOp::kSync && absl::StrContains(path, "step-000004")) {
              return absl::DataLossError("injected fsync failure");
            }
            return absl::OkStatus();
          });
    }
    auto run = Train(ctx, 8, root, true, storage);
    if (run.ok()) return absl::InternalError("Fit succeeded despite a failed save");
    // Every rank: the failing rank's error.
    if (sharded::AgreedFailingRank(run.status()) != kFaulty ||
        !absl::StrContains(run.status().message(), "injected fsync failure")) {
      return absl::InternalError(absl::StrCat("unexpected error: ", run.status().ToString()));
    }
    return Outcome{};
  });
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  auto listing = ckpt::ScanCheckpointRoot(root, ckpt::PosixStorage());
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_EQ(*listing->latest, 2);

  // The previous step loads: a resume starts from it.
  auto resumed = cluster.Run([&](RankContext& ctx) { return Train(ctx, 4, root, true); });
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)[0].fit.start_step, 2);
}

// Records step ends and commits in one order; at step 5 it gives step 4's
// background save time to end on every rank (its `latest`, then a margin),
// so that the step boundaries that follow can learn of the commit.
class StepRecorder : public Recorder {
 public:
  explicit StepRecorder(std::string root) : root_(std::move(root)) {}
  absl::Status OnStepEnd(const TrainState&, int64_t step, double) override {
    events.push_back(absl::StrCat("step ", step));
    if (step == 5) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (FileContents(root_ + "/latest").find("step-000004") == std::string::npos &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    return absl::OkStatus();
  }

 private:
  const std::string root_;
};

TEST(TrainerAsyncCheckpointTest, ACommitIsSeenAtAStepBoundaryBeforeTheNextSave) {
  const std::string root = FreshDir("async_boundary");
  SimulatedCluster cluster(3);
  auto run = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::vector<std::string>> {
    EmbeddingMlp module;
    TrainerOptions options;
    options.max_steps = 12;
    options.seed = kSeed;
    options.checkpoint_dir = root;
    options.checkpoint_every = 4;
    options.keep_last = 2;
    options.async_checkpoint = true;
    options.groups = ctx.groups;
    auto recorder = std::make_shared<StepRecorder>(root);
    SyntheticRegression data(96, 32, kSeed);
    auto fit = Trainer(options, {recorder}).Fit(module, data, ctx.pg);
    if (!fit.ok()) return fit.status();
    if (fit->checkpoints_saved != 3) return absl::InternalError(absl::StrCat(fit->checkpoints_saved, " saves"));
    return recorder->events;
  });
  ASSERT_TRUE(run.ok()) << run.status();
  for (const std::vector<std::string>& events : *run) {
    const auto at = [&](const std::string& e) { return std::find(events.begin(), events.end(), e) - events.begin(); };
    // Step 4's commit is learnt at step 6 or 7 (the loss allreduce carries
    // every rank's "ended"), before step 8 ends and its save starts.
    EXPECT_LT(at("started 4"), at("committed 4"));
    EXPECT_LT(at("step 5"), at("committed 4"));
    EXPECT_LT(at("committed 4"), at("step 8")) << ::testing::PrintToString(events);
    EXPECT_LT(at("committed 8"), at("started 12"));
    EXPECT_EQ(events.back(), "committed 12");
  }
}

TEST(TrainerAsyncCheckpointTest, NeedsAGroupFactory) {
  SimulatedCluster cluster(2);
  const std::string root = FreshDir("no_groups");
  auto run = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<int> {
    ctx.groups = nullptr;
    auto fit = Train(ctx, 2, root, true);
    if (fit.ok()) return absl::InternalError("Fit ran without a group factory");
    if (!absl::IsInvalidArgument(fit.status()) || !absl::StrContains(fit.status().message(), "groups")) {
      return absl::InternalError(fit.status().ToString());
    }
    return 0;
  });
  EXPECT_TRUE(run.ok()) << run.status();
}

}  // namespace
}  // namespace shardlight
