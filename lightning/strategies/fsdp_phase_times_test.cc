// TrainerOptions::phase_times under the strategies, on the simulated
// cluster: fsdp's all-gathers and reduce-scatters (per unit and whole
// model) and the optimizer get time, the phases fit in the steps, every
// step is counted, ddp leaves the collectives at zero, and a run without one
// trains the same losses.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "lightning/phase_times.h"
#include "lightning/strategies/fsdp_strategy.h"
#include "lightning/strategies/fsdp_test_model.h"
#include "lightning/trainer.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;
using testing::Mlp;
using testing::MlpData;

constexpr int64_t kSteps = 3;

struct Timed {
  std::vector<double> losses;
  PhaseTimes times;
};

std::shared_ptr<const Strategy> Fsdp(bool per_unit) {
  FsdpOptions options{{"blocks.0", "blocks.1"}};
  options.per_unit = per_unit;
  return std::make_shared<FsdpStrategy>(options);
}

absl::StatusOr<Timed> Train(RankContext& ctx, std::shared_ptr<const Strategy> strategy, bool timed) {
  Mlp module;
  Timed run;
  TrainerOptions options;
  options.max_steps = kSteps;
  options.seed = 5;
  options.gradient_clip_norm = 1.0;
  options.strategy = std::move(strategy);
  options.phase_times = timed ? &run.times : nullptr;
  MlpData data(10, 5);
  auto fit = Trainer(options).Fit(module, data, ctx.pg);
  if (!fit.ok()) return fit.status();
  run.losses = fit->losses;
  return run;
}

void ExpectPhasesFitInSteps(const PhaseTimes& t, const std::string& what) {
  EXPECT_EQ(t.steps(), kSteps) << what;
  double sum = 0;
  for (Phase p : {Phase::kAllGather, Phase::kReduceScatter, Phase::kOptimizer}) sum += t.seconds(p);
  EXPECT_LE(sum, t.step_seconds()) << what;
  EXPECT_GT(t.compute_seconds(), 0) << what;
}

TEST(FsdpPhaseTimesTest, FsdpCollectivesAndTheOptimizerGetTimeInsideTheSteps) {
  for (bool per_unit : {true, false}) {
    for (int w : {1, 3}) {
      const std::string what = std::string(per_unit ? "per unit" : "whole model") + " W=" + std::to_string(w);
      SimulatedCluster cluster(w);
      auto timed = cluster.Run([&](RankContext& ctx) { return Train(ctx, Fsdp(per_unit), true); });
      ASSERT_TRUE(timed.ok()) << what << ": " << timed.status();
      auto plain = cluster.Run([&](RankContext& ctx) { return Train(ctx, Fsdp(per_unit), false); });
      ASSERT_TRUE(plain.ok()) << what << ": " << plain.status();
      EXPECT_EQ((*timed)[0].losses, (*plain)[0].losses) << what;
      for (int r = 0; r < w; ++r) {
        const PhaseTimes& t = (*timed)[r].times;
        ExpectPhasesFitInSteps(t, what);
        EXPECT_GT(t.seconds(Phase::kAllGather), 0) << what << " rank " << r;
        EXPECT_GT(t.seconds(Phase::kReduceScatter), 0) << what << " rank " << r;
        EXPECT_GT(t.seconds(Phase::kOptimizer), 0) << what << " rank " << r;
        EXPECT_EQ((*plain)[r].times.steps(), 0) << what;  // off: untouched
        EXPECT_EQ((*plain)[r].times.step_seconds(), 0) << what;
      }
    }
  }
}

TEST(FsdpPhaseTimesTest, DdpTimesTheStepsAndTheOptimizerOnly) {
  SimulatedCluster cluster(2);
  auto timed = cluster.Run([&](RankContext& ctx) { return Train(ctx, nullptr, true); });
  ASSERT_TRUE(timed.ok()) << timed.status();
  for (const Timed& run : *timed) {
    ExpectPhasesFitInSteps(run.times, "ddp");
    EXPECT_EQ(run.times.seconds(Phase::kAllGather), 0);
    EXPECT_EQ(run.times.seconds(Phase::kReduceScatter), 0);
    EXPECT_GT(run.times.seconds(Phase::kOptimizer), 0);
  }
}

}  // namespace
}  // namespace shardlight::lightning
