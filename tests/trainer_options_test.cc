// Trainer options and callbacks: epochs cap the steps, checkpoint cadence,
// callback order, and the progress callback's lines.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

#include "lightning/trainer.h"
#include "simulate/embedding_mlp.h"
#include "simulate/core/simulated_cluster.h"
#include "simulate/training_run.h"

namespace shardlight {
namespace {

using ::testing::ElementsAre;
using simulate::RankContext;

class Recorder : public lightning::Callback {
 public:
  absl::Status OnTrainStart(const lightning::TrainState& s) override { return Add("start@", s.start_step); }
  absl::Status OnStepEnd(const lightning::TrainState&, int64_t step, double) override { return Add("step", step); }
  absl::Status OnSaveCheckpoint(const lightning::TrainState&, int64_t step, const std::string&) override {
    return Add("saved", step);
  }
  absl::Status OnLoadCheckpoint(const lightning::TrainState&, int64_t step, const std::string&) override {
    return Add("loaded", step);
  }
  std::vector<std::string> events;

 private:
  absl::Status Add(const std::string& what, int64_t step) {
    events.push_back(what + std::to_string(step));
    return absl::OkStatus();
  }
};

TEST(TrainerOptionsTest, EpochsCheckpointCadenceAndCallbackOrder) {
  simulate::TempDir dir;
  simulate::SimulatedCluster cluster(2);
  auto events = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::vector<std::string>> {
    simulate::EmbeddingMlp module;
    lightning::TrainerOptions options;
    options.max_steps = 100;
    options.max_epochs = 2;  // 2 epochs of 3 steps: 6 steps
    options.checkpoint_dir = dir.path();
    options.checkpoint_every = 4;
    auto recorder = std::make_shared<Recorder>();
    simulate::SyntheticRegression data(96, 8, 3, /*steps_per_epoch=*/3);
    auto fit = lightning::Trainer(options, {recorder}).Fit(module, data, ctx.pg);
    if (!fit.ok()) return fit.status();
    if (fit->end_step != 6 || fit->losses.size() != 6 || fit->checkpoints_saved != 2) {
      return absl::InternalError("wrong step count or checkpoint count");
    }
    // Resumed with the same options: nothing left to do, the load is reported.
    simulate::EmbeddingMlp again;
    auto second = std::make_shared<Recorder>();
    auto resumed = lightning::Trainer(options, {second}).Fit(again, data, ctx.pg);
    if (!resumed.ok()) return resumed.status();
    if (resumed->start_step != 6 || !resumed->losses.empty()) return absl::InternalError("resume");
    recorder->events.insert(recorder->events.end(), second->events.begin(), second->events.end());
    return recorder->events;
  });
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_THAT((*events)[1], ElementsAre("start@0", "step1", "step2", "step3", "step4", "saved4", "step5", "step6",
                                        "saved6", "loaded6", "start@6"));
}

TEST(TrainerOptionsTest, ProgressCallbackPrintsOnRankZeroEveryNSteps) {
  std::ostringstream out0, out1;
  lightning::ProgressCallback rank0(out0, 2), rank1(out1, 2);
  lightning::TrainState s0{0, 2, 0, 5}, s1{1, 2, 0, 5};
  ASSERT_TRUE(rank0.OnTrainStart(s0).ok());
  ASSERT_TRUE(rank1.OnTrainStart(s1).ok());
  for (int step = 1; step <= 5; ++step) {
    ASSERT_TRUE(rank0.OnStepEnd(s0, step, 1.0 / step).ok());
    ASSERT_TRUE(rank1.OnStepEnd(s1, step, 1.0 / step).ok());
  }
  EXPECT_EQ(out1.str(), "");
  std::vector<std::string> lines;
  std::istringstream in(out0.str());
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u) << out0.str();  // steps 2, 4 and the last, 5
  EXPECT_THAT(lines[0], ::testing::MatchesRegex("step 2/5  loss 0\\.500000  [0-9.]+ steps/s"));
  EXPECT_THAT(lines[2], ::testing::StartsWith("step 5/5  loss 0.200000"));
}

}  // namespace
}  // namespace shardlight
