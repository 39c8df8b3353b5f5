// Gradient accumulation and clipping by value in the Trainer (issue 46,
// item 2), under ddp and fsdp at W = 1..4 on the EmbeddingMlp (a sharded
// table of 90 rows: uneven at W = 4; fsdp leaves fc2's weight [1, 16] empty
// on every rank but 0; a micro-batch of 4 rows leaves ranks scoring none): k
// micro-batches of B rows a step train exactly as
// one step over their kB rows (the loss is a mean), with one gradient
// reduction per optimizer step; clipping by value acts, and alike on every
// strategy and world size.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lightning/optimizer_step.h"
#include "lightning/strategies/gradient_clipping.h"
#include "lightning/strategies/ddp_strategy.h"
#include "lightning/strategies/fsdp_strategy.h"
#include "lightning/trainer.h"
#include "simulate/core/simulated_cluster.h"
#include "simulate/embedding_mlp.h"

namespace shardlight {
namespace {

using lightning::Batch;
using lightning::DataSource;
using lightning::Strategy;
using simulate::EmbeddingMlp;
using simulate::SyntheticRegression;
using simulate::RankContext;
using simulate::SimulatedCluster;

constexpr uint64_t kSeed = 3;
constexpr int64_t kSteps = 6;
constexpr int64_t kMicro = 4;   // rows of a micro-batch
constexpr int64_t kVocab = 90;  // the table's rows

// Step s is the k batches GetBatch(s * k + i) of `inner`, concatenated.
class Concatenated : public DataSource {
 public:
  Concatenated(const DataSource& inner, int64_t k) : inner_(inner), k_(k) {}
  Batch GetBatch(int64_t step) const override {
    std::vector<at::Tensor> xs, ys;
    for (int64_t i = 0; i < k_; ++i) {
      Batch b = inner_.GetBatch(lightning::MicroBatchIndex(step, k_, i));
      xs.push_back(b[0]);
      ys.push_back(b[1]);
    }
    return {at::cat(xs), at::cat(ys)};
  }

 private:
  const DataSource& inner_;
  int64_t k_;
};

// Counts the strategy's calls on every rank (the strategy itself does the work).
struct Counts {
  std::atomic<int> before_step{0}, reduce{0};
};
class CountingStrategy : public Strategy {
 public:
  CountingStrategy(std::shared_ptr<const Strategy> inner, Counts* counts) : inner_(std::move(inner)), counts_(counts) {}
  std::string name() const override { return inner_->name(); }
  absl::StatusOr<std::unique_ptr<lightning::StrategyRun>> Setup(lightning::LightningModule& module,
                                                                const lightning::ShardedContext& ctx) const override {
    auto run = inner_->Setup(module, ctx);
    if (!run.ok()) return run.status();
    return std::unique_ptr<lightning::StrategyRun>(new Run(*std::move(run), counts_));
  }

 private:
  class Run : public lightning::StrategyRun {
   public:
    Run(std::unique_ptr<lightning::StrategyRun> inner, Counts* counts) : inner_(std::move(inner)), counts_(counts) {}
    absl::Status BeforeStep(int64_t step) override {
      ++counts_->before_step;
      return inner_->BeforeStep(step);
    }
    absl::Status ReduceGradients(const lightning::Trainables& t, const absl::Status& local,
                                 absl::string_view op) override {
      ++counts_->reduce;
      return inner_->ReduceGradients(t, local, op);
    }
    c10d::ProcessGroup& loss_group() override { return inner_->loss_group(); }

   private:
    std::unique_ptr<lightning::StrategyRun> inner_;
    Counts* counts_;
  };
  std::shared_ptr<const Strategy> inner_;
  Counts* counts_;
};

simulate::EmbeddingMlpOptions Model() {
  simulate::EmbeddingMlpOptions o;
  o.vocab = kVocab;
  return o;
}

std::shared_ptr<const Strategy> Make(bool fsdp) {
  if (fsdp) return std::make_shared<lightning::FsdpStrategy>(lightning::FsdpOptions{{"fc1"}});
  return std::make_shared<lightning::DdpStrategy>();
}

absl::StatusOr<std::vector<double>> Losses(RankContext& ctx, std::shared_ptr<const Strategy> strategy, int64_t k,
                                           const DataSource& data, double clip_value = 0) {
  EmbeddingMlp module(Model());
  lightning::TrainerOptions options;
  options.max_steps = kSteps;
  options.seed = kSeed;
  options.strategy = std::move(strategy);
  options.accumulate_grad_batches = k;
  options.gradient_clip_value = clip_value;
  auto fit = lightning::Trainer(options).Fit(module, data, ctx.pg);
  if (!fit.ok()) return fit.status();
  return fit->losses;
}

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i])) << what << " step " << i;
}

TEST(TrainerAccumulationTest, KMicroBatchesEqualOneStepOverTheirRows) {
  const SyntheticRegression micro(kVocab, kMicro, kSeed);
  for (int64_t k : {2, 3}) {
    const Concatenated whole(micro, k);
    for (bool fsdp : {false, true}) {
      for (int w = 1; w <= 4; ++w) {
        const std::string what = absl::StrCat(fsdp ? "fsdp" : "ddp", " W=", w, " k=", k);
        SimulatedCluster cluster(w);
        Counts counts;
        auto strategy = std::make_shared<CountingStrategy>(Make(fsdp), &counts);
        auto accumulated = cluster.Run([&](RankContext& ctx) { return Losses(ctx, strategy, k, micro); });
        ASSERT_TRUE(accumulated.ok()) << what << ": " << accumulated.status();
        // One BeforeStep and one gradient reduction per optimizer step, on every rank.
        EXPECT_EQ(counts.before_step.load(), kSteps * w) << what;
        EXPECT_EQ(counts.reduce.load(), kSteps * w) << what;
        auto one_step = cluster.Run([&](RankContext& ctx) { return Losses(ctx, Make(fsdp), 1, whole); });
        ASSERT_TRUE(one_step.ok()) << what << ": " << one_step.status();
        ExpectNear((*accumulated)[0], (*one_step)[0], what);
      }
    }
  }
}

TEST(TrainerAccumulationTest, ClippingByValueActsAlikeOnEveryStrategyAndWorldSize) {
  const SyntheticRegression data(kVocab, 8, kSeed);
  SimulatedCluster one(1);
  auto unclipped = one.Run([&](RankContext& ctx) { return Losses(ctx, Make(false), 2, data); });
  ASSERT_TRUE(unclipped.ok()) << unclipped.status();
  auto clipped = one.Run([&](RankContext& ctx) { return Losses(ctx, Make(false), 2, data, 0.02); });
  ASSERT_TRUE(clipped.ok()) << clipped.status();
  EXPECT_NE((*clipped)[0].back(), (*unclipped)[0].back()) << "a clip of 0.02 changes the run";
  for (bool fsdp : {false, true}) {
    for (int w = 2; w <= 4; ++w) {
      SimulatedCluster cluster(w);
      auto run = cluster.Run([&](RankContext& ctx) { return Losses(ctx, Make(fsdp), 2, data, 0.02); });
      ASSERT_TRUE(run.ok()) << run.status();
      ExpectNear((*run)[0], (*clipped)[0], absl::StrCat(fsdp ? "fsdp" : "ddp", " W=", w));
    }
  }
}

TEST(ClipGradientValueTest, ClampsEveryGradientElement) {
  EmbeddingMlp module(Model());
  const lightning::Trainables trainables = lightning::TrainablesOf(module);
  for (const auto& d : trainables.dense) d.param.mutable_grad() = at::linspace(-1, 1, d.param.numel()).view_as(d.param);
  lightning::ClipGradientValue(trainables, 0.25);
  for (const auto& d : trainables.dense) {
    const at::Tensor want = at::linspace(-1, 1, d.param.numel()).view_as(d.param).clamp(-0.25, 0.25);
    EXPECT_TRUE(at::equal(d.param.grad(), want)) << d.key;
  }
}

}  // namespace
}  // namespace shardlight
