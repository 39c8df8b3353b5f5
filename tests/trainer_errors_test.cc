// The Trainer on bad modules and options: each fails with a clear error on
// every rank, and setup fails before any sharded state exists.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <utility>

#include "lightning/trainer.h"
#include "sharded/status_macros.h"
#include "simulate/embedding_mlp.h"
#include "simulate/core/simulated_cluster.h"

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
    EXPECT_THAT(e, HasSubstr("UNIMPLEMENTED: training step 0 failed on rank 0: Untrained does not override LightningModule::TrainingStep"));
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
  for (const std::string& e : errors) EXPECT_EQ(e, "DATA_LOSS: training step 2 failed on rank 1: bad batch on rank 1 (1 other rank failed too)");
}

// --- Every kind of user code fails every rank with the failing rank's error,
// at several world sizes, well before any collective timeout.

// Data whose GetBatch throws on one rank at step 1.
class ThrowingData : public lightning::DataSource {
 public:
  ThrowingData(int rank, int bad_rank) : rank_(rank), bad_rank_(bad_rank), inner_(96, 8, 1) {}
  lightning::Batch GetBatch(int64_t step) const override {
    if (rank_ == bad_rank_ && step == 1) throw std::runtime_error("no batch here");
    return inner_.GetBatch(step);
  }

 private:
  int rank_, bad_rank_;
  simulate::SyntheticRegression inner_;
};

// An optimizer that fails on one rank at its second step.
class FailingOptimizer : public lightning::Optimizer {
 public:
  FailingOptimizer(lightning::Trainables t, bool fails) : Optimizer(std::move(t)), fails_(fails) {}
  void Step() override {
    if (fails_ && ++steps_ == 2) throw std::runtime_error("optimizer blew up");
  }
  absl::Status AddStateTo(sharded::StateDict&, const std::string&) override { return absl::OkStatus(); }

 private:
  bool fails_;
  int steps_ = 0;
};

struct FailingOptimizerModule : simulate::EmbeddingMlp {
  absl::Status ConfigureShardedModel(const lightning::ShardedContext& ctx) override {
    rank = ctx.rank;
    last = ctx.world_size - 1;
    return EmbeddingMlp::ConfigureShardedModel(ctx);
  }
  absl::StatusOr<std::unique_ptr<lightning::Optimizer>> ConfigureOptimizers() override {
    return std::unique_ptr<lightning::Optimizer>(new FailingOptimizer(lightning::TrainablesOf(*this), rank == last));
  }
  int rank = 0, last = 0;
};

// Fails after its sharded members exist (so no peer is left in a factory).
struct FailingConfigure : simulate::EmbeddingMlp {
  absl::Status ConfigureShardedModel(const lightning::ShardedContext& ctx) override {
    SL_RETURN_IF_ERROR(EmbeddingMlp::ConfigureShardedModel(ctx));
    if (ctx.rank == ctx.world_size - 1) return absl::FailedPreconditionError("no GPU on this rank");
    return absl::OkStatus();
  }
};

class FailingCallback : public lightning::Callback {
 public:
  explicit FailingCallback(bool fails) : fails_(fails) {}
  absl::Status OnStepEnd(const lightning::TrainState&, int64_t step, double) override {
    if (fails_ && step == 2) return absl::AbortedError("callback said stop");
    return absl::OkStatus();
  }
  absl::Status OnTrainStart(const lightning::TrainState&) override {
    if (throw_at_start_) throw std::logic_error("start hook threw");
    return absl::OkStatus();
  }
  bool throw_at_start_ = false;

 private:
  bool fails_;
};

enum class Failing { kData, kOptimizer, kConfigure, kStepEndCallback, kStartCallback };

std::vector<std::string> SymmetricFitErrors(int w, Failing what) {
  SimulatedCluster cluster(w);
  lightning::TrainerOptions options;
  options.max_steps = 4;
  options.probe_timeout = std::chrono::seconds(60);  // the agreement, not a timeout, must end it
  auto errors = cluster.Run([&](RankContext& ctx) -> std::string {
    const bool bad = ctx.rank == w - 1;
    auto callback = std::make_shared<FailingCallback>(bad && what == Failing::kStepEndCallback);
    callback->throw_at_start_ = bad && what == Failing::kStartCallback;
    lightning::Trainer trainer(options, {callback});
    ThrowingData data(ctx.rank, what == Failing::kData ? w - 1 : -1);
    absl::StatusOr<lightning::FitResult> fit;
    if (what == Failing::kOptimizer) {
      FailingOptimizerModule module;
      fit = trainer.Fit(module, data, ctx.pg);
    } else if (what == Failing::kConfigure) {
      FailingConfigure module;
      fit = trainer.Fit(module, data, ctx.pg);
    } else {
      simulate::EmbeddingMlp module;
      fit = trainer.Fit(module, data, ctx.pg);
    }
    return fit.ok() ? "" : fit.status().ToString();
  });
  EXPECT_TRUE(errors.ok()) << errors.status();
  return errors.ok() ? *errors : std::vector<std::string>();
}

class SymmetricFailureTest : public ::testing::TestWithParam<int> {};

TEST_P(SymmetricFailureTest, EveryKindOfUserCodeFailsEveryRankAlike) {
  const int w = GetParam();
  const std::string last = std::to_string(w - 1);
  const std::pair<Failing, std::string> cases[] = {
      {Failing::kData, "INTERNAL: training step 1 failed on rank " + last + ": exception: no batch here"},
      {Failing::kOptimizer, "INTERNAL: optimizer step 1 failed on rank " + last + ": exception: optimizer blew up"},
      {Failing::kConfigure, "FAILED_PRECONDITION: configure failed on rank " + last + ": no GPU on this rank"},
      {Failing::kStepEndCallback, "ABORTED: OnStepEnd failed on rank " + last + ": callback said stop"},
      {Failing::kStartCallback, "INTERNAL: OnTrainStart failed on rank " + last + ": exception: start hook threw"},
  };
  for (const auto& [what, expected] : cases) {
    const auto start = std::chrono::steady_clock::now();
    const auto errors = SymmetricFitErrors(w, what);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20)) << expected;
    ASSERT_EQ(errors.size(), static_cast<size_t>(w));
    for (const std::string& e : errors) EXPECT_EQ(e, expected);
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, SymmetricFailureTest, ::testing::Values(1, 2, 4));

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

// --- Configure: a throw on one rank, and what a second Fit does.

// Throws on rank 1 after its sharded members exist (no peer is left in a
// factory's collective).
struct ThrowingConfigure : CountingMlp {
  absl::Status ConfigureShardedModel(const lightning::ShardedContext& ctx) override {
    SL_RETURN_IF_ERROR(CountingMlp::ConfigureShardedModel(ctx));
    if (ctx.rank == 1) throw std::runtime_error("configure threw on rank 1");
    return absl::OkStatus();
  }
};

TEST(TrainerConfigureTest, ThrowOnOneRankGivesEveryRankThatRanksError) {
  lightning::TrainerOptions options;
  options.probe_timeout = std::chrono::seconds(60);  // the agreement, not a timeout, must end it
  for (int w : {2, 3, 4}) {
    const auto start = std::chrono::steady_clock::now();
    const auto errors = FitErrors<ThrowingConfigure>(w, options);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20)) << "w=" << w;
    ASSERT_EQ(errors.size(), static_cast<size_t>(w));
    for (const std::string& e : errors) {
      EXPECT_EQ(e, "INTERNAL: configure failed on rank 1: exception: configure threw on rank 1") << "w=" << w;
    }
  }
}

// A second Fit on the same group keeps the members the first created: no
// second ConfigureShardedModel, no re-initialisation (even with another
// seed), and training continues from them.
TEST(TrainerConfigureTest, SecondFitOnTheSameGroupKeepsTheConfiguredMembers) {
  for (int w : {2, 3}) {
    SimulatedCluster cluster(w);
    simulate::SyntheticRegression data(96, 8, 1);
    CountingMlp::configured = 0;
    auto s = cluster.Run([&](RankContext& ctx) -> absl::Status {
      CountingMlp module;
      lightning::TrainerOptions options;
      options.max_steps = 3;
      SL_RETURN_IF_ERROR(lightning::Trainer(options).Fit(module, data, ctx.pg).status());
      EXPECT_EQ(module.configured_group(), ctx.pg);
      const sharded::ShardedTensor* table = module.table();
      SL_ASSIGN_OR_RETURN(const at::Tensor trained, module.table()->FullTensor());
      options.seed = 7;
      options.max_steps = 0;
      SL_RETURN_IF_ERROR(lightning::Trainer(options).Fit(module, data, ctx.pg).status());
      EXPECT_EQ(module.table(), table);
      SL_ASSIGN_OR_RETURN(const at::Tensor after, module.table()->FullTensor());
      EXPECT_TRUE(after.equal(trained)) << "the second Fit re-initialised the table";
      options.max_steps = 2;
      SL_ASSIGN_OR_RETURN(const lightning::FitResult more, lightning::Trainer(options).Fit(module, data, ctx.pg));
      EXPECT_EQ(more.losses.size(), 2u);
      SL_ASSIGN_OR_RETURN(const at::Tensor moved, module.table()->FullTensor());
      EXPECT_FALSE(moved.equal(trained)) << "the third Fit did not train the kept table";
      return absl::OkStatus();
    });
    EXPECT_TRUE(s.ok()) << "w=" << w << ": " << s;
    EXPECT_EQ(CountingMlp::configured.load(), w) << "ConfigureShardedModel ran more than once per rank";
  }
}

// A module configured on one group cannot be fitted on another: every rank
// gets the same clear error, and the module is left as it was.
TEST(TrainerConfigureTest, FitOnAnotherGroupIsRefusedOnEveryRank) {
  const int w = 2;
  std::vector<std::unique_ptr<CountingMlp>> modules;
  for (int r = 0; r < w; ++r) modules.push_back(std::make_unique<CountingMlp>());
  simulate::SyntheticRegression data(96, 8, 1);
  lightning::TrainerOptions options;
  options.max_steps = 1;
  SimulatedCluster first(w);
  ASSERT_TRUE(first.Run([&](RankContext& ctx) {
    return lightning::Trainer(options).Fit(*modules[ctx.rank], data, ctx.pg).status();
  }).ok());
  SimulatedCluster second(w);
  auto errors = second.Run([&](RankContext& ctx) -> std::string {
    auto fit = lightning::Trainer(options).Fit(*modules[ctx.rank], data, ctx.pg);
    return fit.ok() ? "" : fit.status().ToString();
  });
  ASSERT_TRUE(errors.ok()) << errors.status();
  for (const std::string& e : *errors) {
    EXPECT_THAT(e, HasSubstr("FAILED_PRECONDITION: configure failed on rank 0: EmbeddingMlp was configured by an "
                             "earlier Fit on another process group (2 ranks)"));
  }
}

}  // namespace
}  // namespace shardlight
