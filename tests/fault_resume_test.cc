// Fault plans through the Trainer on the simulated cluster: each kind ends in
// bounded time with an error naming a rank, leaves the last committed
// checkpoint (the step before the fault) loadable, and a resume completes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

#include "simulate/core/simulated_cluster.h"
#include "simulate/training_run.h"

namespace shardlight::simulate {
namespace {

using ::testing::HasSubstr;

struct Case {
  const char* plan;
  const char* error;          // substring of the run's error, which names the faulty rank
  int64_t committed_step;     // the checkpoint left behind
  bool async = false;         // background checkpoints into a root (keep_last = 2)
};

class FaultResumeTest : public ::testing::TestWithParam<Case> {};

TEST_P(FaultResumeTest, FailsBoundedKeepsCheckpointResumes) {
  const Case& c = GetParam();
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  TrainingRunOptions run;
  run.world_size = 3;
  run.max_steps = 6;
  run.checkpoint_dir = dir.path();
  run.checkpoint_every = 1;
  run.collective_timeout = std::chrono::milliseconds(1500);
  run.fault = *ParseFaultPlan(c.plan);
  if (c.async) {
    run.async_checkpoint = true;
    run.async_staging_bytes = 64 << 10;
    run.keep_last = 2;
  }
  const auto start = std::chrono::steady_clock::now();
  auto faulted = RunTraining(run);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  ASSERT_FALSE(faulted.ok()) << c.plan << " did not fail the run";
  EXPECT_THAT(std::string(faulted.status().message()), HasSubstr(c.error));
  EXPECT_TRUE(FailedRank(faulted.status()).has_value()) << "the error must come from a rank";

  run.fault.reset();
  auto resumed = RunTraining(run);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->ranks[0].start_step, c.committed_step);
  EXPECT_EQ(resumed->ranks[0].end_step, 6);
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, FaultResumeTest,
    ::testing::Values(Case{"crash:rank=2,step=3", "rank 2: injected crash of rank 2 after step 3", 2},
                      Case{"save-crash:rank=1,step=4", "failed on rank 1: injected crash of rank 1 during the save", 3},
                      Case{"timeout:rank=0,step=2", "rank 0: injected stall of rank 0 after step 2", 1},
                      // The same faults while saves run in the background.
                      Case{"crash:rank=2,step=3", "rank 2: injected crash of rank 2 after step 3", 2, true},
                      Case{"save-crash:rank=1,step=4", "failed on rank 1: injected crash of rank 1 during the save", 3,
                           true},
                      Case{"timeout:rank=0,step=2", "rank 0: injected stall of rank 0 after step 2", 1, true}),
    [](const auto& info) {
      std::string name = info.param.plan;
      name = name.substr(0, name.find(':'));
      if (name == "save-crash") name = "save_crash";
      return info.param.async ? name + "_async" : name;
    });

TEST(FaultResumeTest, DelayShorterThanTheTimeoutCompletes) {
  TempDir dir;
  TrainingRunOptions run;
  run.world_size = 3;
  run.max_steps = 4;
  run.checkpoint_dir = dir.path();
  run.collective_timeout = std::chrono::milliseconds(3000);
  run.fault = *ParseFaultPlan("delay:rank=1,step=2,ms=400");
  auto result = RunTraining(run);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->ranks[1].end_step, 4);
  EXPECT_GE(result->ranks[1].seconds, 0.4);
}

// A background save that stays in flight for a while (its data file is
// slow to become durable) delays nothing but its own commit: the run
// completes, every save commits.
TEST(FaultResumeTest, SlowBackgroundSaveCompletes) {
  TempDir dir;
  TrainingRunOptions run;
  run.world_size = 3;
  run.max_steps = 6;
  run.checkpoint_dir = dir.path();
  run.checkpoint_every = 2;
  run.keep_last = 2;
  run.async_checkpoint = true;
  run.collective_timeout = std::chrono::milliseconds(3000);
  run.fault = *ParseFaultPlan("save-delay:rank=1,step=2,ms=400");
  auto result = RunTraining(run);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->ranks[1].end_step, 6);
  EXPECT_EQ(result->ranks[1].checkpoints_saved, 3);
  run.fault.reset();
  run.max_steps = 8;
  auto resumed = RunTraining(run);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->ranks[0].start_step, 6);
}

}  // namespace
}  // namespace shardlight::simulate
