// The Trainer on bad modules and options: each fails with a clear error on
// every rank, and setup fails before any sharded state exists.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>

#include "lightning/trainer.h"
#include "simulate/embedding_mlp.h"
#include "simulate/simulated_cluster.h"

namespace shardlight {
namespace {

using ::testing::HasSubstr;
using simulate::RankContext;
using simulate::SimulatedCluster;

struct Untrained : lightning::LightningModule {
  Untrained() : LightningModule("Untrained") {}
};

struct CountingMlp : simulate::EmbeddingMlp {
  absl::Status ConfigureShardedModel(const lightning::ShardedContext& ctx) override {
    ++configured;
    return EmbeddingMlp::ConfigureShardedModel(ctx);
  }
  static inline std::atomic<int> configured{0};
};

struct VectorLoss : simulate::EmbeddingMlp {
  absl::StatusOr<at::Tensor> TrainingStep(const lightning::Batch&, const lightning::StepContext&) override {
    return at::ones({2});
  }
};

// Only rank 1 fails, at step 2: every rank must return rank 1's error.
struct FailsOnRankOne : simulate::EmbeddingMlp {
  absl::StatusOr<at::Tensor> TrainingStep(const lightning::Batch& b, const lightning::StepContext& ctx) override {
    if (ctx.rank == 1 && ctx.step == 2) return absl::DataLossError("bad batch on rank 1");
    if (ctx.rank == 2 && ctx.step == 2) throw std::runtime_error("should not matter: rank 1 is reported first");
    return EmbeddingMlp::TrainingStep(b, ctx);
  }
};

struct NoOptimizer : simulate::EmbeddingMlp {
  absl::StatusOr<std::unique_ptr<lightning::Optimizer>> ConfigureOptimizers() override {
    return std::unique_ptr<lightning::Optimizer>();
  }
};

template <typename Module>
std::vector<std::string> FitErrors(int w, lightning::TrainerOptions options) {
  SimulatedCluster cluster(w);
  simulate::SyntheticRegression data(96, 8, 1);
  auto errors = cluster.Run([&](RankContext& ctx) -> std::string {
    Module module;
    auto fit = lightning::Trainer(options).Fit(module, data, ctx.pg);
    return fit.ok() ? "" : fit.status().ToString();
  });
  EXPECT_TRUE(errors.ok()) << errors.status();
  return errors.ok() ? *errors : std::vector<std::string>();
}

TEST(TrainerErrorsTest, ModuleWithoutTrainingStep) {
  for (const std::string& e : FitErrors<Untrained>(2, {})) {
    EXPECT_THAT(e, HasSubstr("UNIMPLEMENTED: rank 0: Untrained does not override LightningModule::TrainingStep"));
  }
}

TEST(TrainerErrorsTest, NonScalarLoss) {
  for (const std::string& e : FitErrors<VectorLoss>(3, {})) {
    EXPECT_THAT(e, HasSubstr("TrainingStep returned a loss with 2 elements; want a scalar"));
  }
}

TEST(TrainerErrorsTest, OneRanksFailedStepFailsEveryRankTheSameWay) {
  lightning::TrainerOptions options;
  options.probe_timeout = std::chrono::seconds(60);  // the agreement, not a timeout, must end it
  const auto start = std::chrono::steady_clock::now();
  const auto errors = FitErrors<FailsOnRankOne>(3, options);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  ASSERT_EQ(errors.size(), 3u);
  for (const std::string& e : errors) EXPECT_EQ(e, "DATA_LOSS: rank 1: bad batch on rank 1");
}

TEST(TrainerErrorsTest, NullOptimizer) {
  for (const std::string& e : FitErrors<NoOptimizer>(2, {})) {
    EXPECT_THAT(e, HasSubstr("ConfigureOptimizers returned null"));
  }
}

// The probe runs before ConfigureShardedModel: a failed probe leaves no
// sharded state behind.
TEST(TrainerErrorsTest, FailedProbeStopsBeforeShardedStateExists) {
  lightning::TrainerOptions options;
  options.probe_timeout = std::chrono::milliseconds(0);
  CountingMlp::configured = 0;
  for (const std::string& e : FitErrors<CountingMlp>(2, options)) EXPECT_THAT(e, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_EQ(CountingMlp::configured.load(), 0);
}

// A checkpoint directory holding garbage: the resume fails on every rank
// naming the file, and the module keeps its freshly configured state.
TEST(TrainerErrorsTest, CorruptCheckpointFailsTheResumeOnEveryRank) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/corrupt_ckpt";
  std::filesystem::create_directories(dir);
  std::FILE* f = std::fopen((dir + "/index.json").c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("{\"format_version\": 1, \"keys\": [", f);  // truncated JSON
  std::fclose(f);
  lightning::TrainerOptions options;
  options.checkpoint_dir = dir;
  const auto errors = FitErrors<simulate::EmbeddingMlp>(3, options);
  ASSERT_EQ(errors.size(), 3u);
  for (const std::string& e : errors) {
    EXPECT_THAT(e, HasSubstr("index.json"));
    EXPECT_EQ(e, errors[0]) << "ranks disagree";
  }
}

}  // namespace
}  // namespace shardlight
