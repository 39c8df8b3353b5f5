// Metrics inside Trainer.Fit: updated in TrainingStep, computed and printed by
// MetricsCallback, saved in the Trainer's checkpoints and restored on resume.
// A run checkpointed at W=4 and resumed at W=3 ends with the same metric
// values as an uninterrupted run.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lightning/lightning_module.h"
#include "lightning/metrics/accuracy.h"
#include "lightning/metrics/cat_metric.h"
#include "lightning/metrics/confusion_matrix.h"
#include "lightning/metrics/mean_metric.h"
#include "lightning/metrics/mean_squared_error.h"
#include "lightning/metrics/metrics_callback.h"
#include "lightning/trainer.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/storage/in_memory_storage.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning::metrics {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;

constexpr int64_t kClasses = 9;

using sharded::checkpoint::testing::FreshDir;

// Step s's global batch: scores, target, preds, values; its size varies.
class Data : public DataSource {
 public:
  Batch GetBatch(int64_t step) const override {
    auto gen = at::detail::createCPUGenerator(100 + step);
    const int64_t n = 5 + (step * 7) % 13;
    return {at::randn({n, kClasses}, gen, at::kFloat), at::randint(kClasses, {n}, gen, at::kLong),
            at::randn({n}, gen, at::kFloat), at::randn({n}, gen, at::kFloat)};
  }
};

struct Model : LightningModule {
  Model() : LightningModule("Model") {
    w = register_parameter("w", at::ones({1}));
    acc = register_module("acc", *Accuracy::Create(kClasses, 2));
    mse = register_module("mse", std::make_shared<MeanSquaredError>());
    confmat = register_module("confmat", *ConfusionMatrix::Create(kClasses));
    mean = register_module("mean", std::make_shared<MeanMetric>());
    cat = register_module("cat", std::make_shared<CatMetric>());
  }
  absl::StatusOr<at::Tensor> TrainingStep(const Batch& b, const StepContext& ctx) override {
    // Uneven split: rank 0 nothing, the rest by quadratic boundaries.
    const int64_t n = b[1].size(0);
    const int world = ctx.world_size;
    auto bound = [&](int r) { return r <= 1 ? 0 : n * (r - 1) * (r - 1) / (int64_t{world - 1} * (world - 1)); };
    int64_t begin = 0, end = n;
    if (world > 1) {
      begin = bound(ctx.rank);
      end = bound(ctx.rank + 1);
    }
    auto part = [&](const at::Tensor& t) { return t.narrow(0, begin, end - begin); };
    SL_RETURN_IF_ERROR(acc->Update(part(b[0]), part(b[1])));
    SL_RETURN_IF_ERROR(mse->Update(part(b[2]), part(b[3])));
    SL_RETURN_IF_ERROR(confmat->Update(part(b[0]), part(b[1])));
    SL_RETURN_IF_ERROR(mean->Update(part(b[2])));
    SL_RETURN_IF_ERROR(cat->Update(part(b[3])));
    return (w * w).sum() / static_cast<double>(world);
  }
  at::Tensor w;
  std::shared_ptr<Accuracy> acc;
  std::shared_ptr<MeanSquaredError> mse;
  std::shared_ptr<ConfusionMatrix> confmat;
  std::shared_ptr<MeanMetric> mean;
  std::shared_ptr<CatMetric> cat;
};

MetricsCallback::NamedMetrics Named(Model& m) {
  return {{"acc", m.acc}, {"mse", m.mse}, {"confmat", m.confmat}, {"mean", m.mean}};
}

struct Final {
  std::map<std::string, double> logged;
  at::Tensor confmat, cat;
  std::vector<int64_t> computed_at;
};

absl::StatusOr<Final> Train(RankContext& ctx, int64_t max_steps, const std::string& dir, std::ostream* out,
                            std::shared_ptr<sharded::checkpoint::Storage> storage = nullptr) {
  Model model;
  TrainerOptions options;
  options.max_steps = max_steps;
  options.checkpoint_dir = dir;
  options.checkpoint_every = 2;
  options.save_options.storage = std::move(storage);
  auto callback = std::make_shared<MetricsCallback>(Named(model), out, 2);
  Trainer trainer(options, {callback});
  SL_RETURN_IF_ERROR(trainer.Fit(model, Data(), ctx.pg).status());
  Final f;
  f.logged = callback->last();
  f.computed_at = callback->computed_at();
  SL_ASSIGN_OR_RETURN(sharded::StateValue cm, model.confmat->Compute());
  SL_ASSIGN_OR_RETURN(f.confmat, std::get<sharded::ShardedTensor>(cm).FullTensor());
  SL_ASSIGN_OR_RETURN(sharded::StateValue cat, model.cat->Compute());
  f.cat = std::get<at::Tensor>(cat);
  return f;
}

void ExpectSame(const Final& got, const Final& want, const std::string& where) {
  ASSERT_EQ(got.logged.size(), 4u) << where;
  for (const auto& [name, value] : want.logged) EXPECT_NEAR(got.logged.at(name), value, 1e-12) << where << " " << name;
  EXPECT_TRUE(at::equal(got.confmat, want.confmat)) << where;
  EXPECT_TRUE(at::equal(std::get<0>(got.cat.sort()), std::get<0>(want.cat.sort()))) << where;
}

TEST(MetricTrainerTest, CallbackLogsEveryNStepsAndAtTheEnd) {
  SimulatedCluster cluster(3);
  std::ostringstream out;
  auto got = cluster.Run([&](RankContext& ctx) { return Train(ctx, 5, "", ctx.rank == 0 ? &out : nullptr); });
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].computed_at, (std::vector<int64_t>{2, 4, 5}));
  const std::string text = out.str();
  EXPECT_NE(text.find("step 2/5  metrics  acc "), std::string::npos) << text;
  EXPECT_NE(text.find("step 5/5  metrics  acc "), std::string::npos) << text;
  EXPECT_NE(text.find("  mse "), std::string::npos) << text;
  EXPECT_NE(text.find("  confmat "), std::string::npos) << text;
  // Every rank computed the same values.
  for (int r = 1; r < 3; ++r) ExpectSame((*got)[r], (*got)[0], absl::StrCat("rank ", r));
}

// W=4 for 3 steps (checkpoint at 2 and 3), resumed on W=3 up to 7: the same
// final metrics as 7 uninterrupted steps on W=4 and on W=2.
TEST(MetricTrainerTest, CheckpointAtFourRanksResumedAtThreeGivesTheSameFinalValues) {
  SimulatedCluster four(4), three(3), two(2);
  auto straight = four.Run([&](RankContext& ctx) { return Train(ctx, 7, "", nullptr); });
  ASSERT_TRUE(straight.ok()) << straight.status();
  auto straight2 = two.Run([&](RankContext& ctx) { return Train(ctx, 7, "", nullptr); });
  ASSERT_TRUE(straight2.ok()) << straight2.status();
  ExpectSame((*straight2)[0], (*straight)[0], "W=2 vs W=4");

  const std::string dir = FreshDir("metrics_4_to_3");
  auto first = four.Run([&](RankContext& ctx) { return Train(ctx, 3, dir, nullptr); });
  ASSERT_TRUE(first.ok()) << first.status();
  auto resumed = three.Run([&](RankContext& ctx) { return Train(ctx, 7, dir, nullptr); });
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  for (int r = 0; r < 3; ++r) ExpectSame((*resumed)[r], (*straight)[0], absl::StrCat("resumed rank ", r));
  // The checkpoint carried the metric states: a run that lost them would
  // have counted only steps 3..6.
  EXPECT_EQ((*resumed)[0].confmat.sum().item<int64_t>(), (*straight)[0].confmat.sum().item<int64_t>());
}

// Issue 49: the cat states' sizes are read through the Trainer's storage,
// as the rest of the checkpoint is: a checkpoint that exists only in memory
// resumes with the same final values.
TEST(MetricTrainerTest, ResumeReadsMetricStatesThroughTheTrainersStorage) {
  SimulatedCluster three(3), two(2);
  auto straight = three.Run([&](RankContext& ctx) { return Train(ctx, 5, "", nullptr); });
  ASSERT_TRUE(straight.ok()) << straight.status();
  auto memory = std::make_shared<sharded::checkpoint::InMemoryStorage>();
  const std::string dir = "memory/metrics";  // no such directory on disk
  auto first = three.Run([&](RankContext& ctx) { return Train(ctx, 3, dir, nullptr, memory); });
  ASSERT_TRUE(first.ok()) << first.status();
  auto resumed = two.Run([&](RankContext& ctx) { return Train(ctx, 5, dir, nullptr, memory); });
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  for (int r = 0; r < 2; ++r) ExpectSame((*resumed)[r], (*straight)[0], absl::StrCat("resumed rank ", r));
  EXPECT_FALSE(std::filesystem::exists(dir));
}

// A bad update on one rank inside TrainingStep fails every rank with it.
struct BadModel : Model {
  absl::StatusOr<at::Tensor> TrainingStep(const Batch& b, const StepContext& ctx) override {
    if (ctx.rank == 2 && ctx.step == 1) {
      SL_RETURN_IF_ERROR(acc->Update(b[0], b[1] + kClasses));  // ids out of range
    }
    return Model::TrainingStep(b, ctx);
  }
};

TEST(MetricTrainerTest, BadUpdateOnOneRankFailsEveryRank) {
  SimulatedCluster cluster(3);
  auto got = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::string> {
    BadModel model;
    TrainerOptions options;
    options.max_steps = 4;
    Trainer trainer(options, {std::make_shared<MetricsCallback>(Named(model), nullptr, 1)});
    return trainer.Fit(model, Data(), ctx.pg).status().ToString();
  });
  ASSERT_TRUE(got.ok()) << got.status();
  for (const auto& s : *got) {
    EXPECT_NE(s.find("rank 2: metric 'Accuracy': target holds class id"), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace shardlight::lightning::metrics
