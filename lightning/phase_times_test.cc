// PhaseTimes' accounting: a phase that runs inside a step gets time, the
// phases never sum to more than the steps, time outside a step or inside
// another phase counts nothing, and a null PhaseTimes is a no-op.
#include "lightning/phase_times.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace shardlight::lightning {
namespace {

void Busy() { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }

double PhaseSum(const PhaseTimes& t) {
  return t.seconds(Phase::kAllGather) + t.seconds(Phase::kReduceScatter) + t.seconds(Phase::kOptimizer);
}

TEST(PhaseTimesTest, APhaseInsideAStepGetsTimeAndThePhasesFitInTheStep) {
  PhaseTimes times;
  for (int s = 0; s < 3; ++s) {
    PhaseTimes::StepScope step(&times);
    { PhaseTimes::Scope gather(&times, Phase::kAllGather); Busy(); }
    Busy();  // compute
    { PhaseTimes::Scope reduce(&times, Phase::kReduceScatter); Busy(); }
    { PhaseTimes::Scope optimizer(&times, Phase::kOptimizer); Busy(); }
  }
  EXPECT_EQ(times.steps(), 3);
  for (Phase p : {Phase::kAllGather, Phase::kReduceScatter, Phase::kOptimizer}) {
    EXPECT_GT(times.seconds(p), 0) << PhaseName(p);
  }
  EXPECT_GT(times.compute_seconds(), 0);
  EXPECT_LE(PhaseSum(times), times.step_seconds());
  EXPECT_DOUBLE_EQ(times.compute_seconds(), times.step_seconds() - PhaseSum(times));
}

TEST(PhaseTimesTest, TimeOutsideAStepOrInsideAnotherPhaseCountsNothing) {
  PhaseTimes times;
  { PhaseTimes::Scope gather(&times, Phase::kAllGather); Busy(); }  // no step open
  EXPECT_EQ(times.seconds(Phase::kAllGather), 0);
  {
    PhaseTimes::StepScope step(&times);
    PhaseTimes::StepScope inner(&times);  // one step, counted once
    PhaseTimes::Scope reduce(&times, Phase::kReduceScatter);
    { PhaseTimes::Scope gather(&times, Phase::kAllGather); Busy(); }  // inside reduce: not counted
  }
  EXPECT_EQ(times.steps(), 1);
  EXPECT_EQ(times.seconds(Phase::kAllGather), 0);
  EXPECT_GT(times.seconds(Phase::kReduceScatter), 0);
  EXPECT_LE(PhaseSum(times), times.step_seconds());
}

TEST(PhaseTimesTest, NullIsANoOpAndResetClears) {
  {
    PhaseTimes::StepScope step(nullptr);
    PhaseTimes::Scope gather(nullptr, Phase::kAllGather);
  }
  PhaseTimes times;
  {
    PhaseTimes::StepScope step(&times);
    PhaseTimes::Scope optimizer(&times, Phase::kOptimizer);
    Busy();
  }
  EXPECT_GT(times.seconds(Phase::kOptimizer), 0);
  times.Reset();
  EXPECT_EQ(times.steps(), 0);
  EXPECT_EQ(times.step_seconds(), 0);
  EXPECT_EQ(times.seconds(Phase::kOptimizer), 0);
  EXPECT_EQ(times.PerStepLine(),
            "steps 0 step_s 0.000000 all_gather_s 0.000000 compute_s 0.000000 reduce_scatter_s 0.000000 "
            "optimizer_s 0.000000");
}

}  // namespace
}  // namespace shardlight::lightning
