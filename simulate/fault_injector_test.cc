#include "simulate/fault_injector.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>

namespace shardlight::simulate {
namespace {

using ::testing::HasSubstr;

TEST(FaultInjectorTest, InjectorFailsOnlyItsRankAndStep) {
  FaultInjector crash(*ParseFaultPlan("crash:rank=1,step=3"), std::chrono::milliseconds(100), 1);
  lightning::TrainState rank0{0, 2, 0, 10}, rank1{1, 2, 0, 10};
  EXPECT_TRUE(crash.OnStepEnd(rank0, 3, 0.0).ok());
  EXPECT_TRUE(crash.OnStepEnd(rank1, 2, 0.0).ok());
  absl::Status s = crash.OnStepEnd(rank1, 3, 0.0);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(), "injected crash of rank 1 after step 3");
}

// Syncs a new file `name` in `dir` through `storage`.
absl::Status Sync(sharded::checkpoint::Storage& storage, const std::string& dir, const std::string& name) {
  EXPECT_TRUE(storage.MakeDirectories(dir).ok());
  auto file = sharded::checkpoint::File::CreateNew(storage, dir + "/" + name);
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? file->Sync() : file.status();
}

// save-crash in a plain directory: the storage fails the fsync of rank 0's
// temporary data file in the save of step 2 -- the second save of a run that
// checkpoints every step -- and nothing else: not another rank's, not the
// index, not a directory, not a later save.
TEST(FaultInjectorTest, SaveCrashFailsItsRanksDataFileInItsSave) {
  const std::string dir = ::testing::TempDir() + "/fault_plan_save";
  std::filesystem::remove_all(dir);
  for (int rank : {1, 0}) {
    std::filesystem::remove_all(dir);
    FaultInjector save(*ParseFaultPlan("save-crash:rank=0,step=2"), std::chrono::milliseconds(100), 1);
    auto storage = save.SaveStorage();
    ASSERT_TRUE(save.OnTrainStart({rank, 2, 0, 10}).ok());
    EXPECT_TRUE(Sync(*storage, dir, ".tmp-a-r0000" + std::to_string(rank) + ".safetensors").ok()) << "step 1's save";
    EXPECT_TRUE(Sync(*storage, dir, ".tmp-c-index.json").ok()) << "not a data file";
    EXPECT_TRUE(storage->SyncDirectory(dir).ok()) << "not a file";
    const absl::Status second = Sync(*storage, dir, ".tmp-d-r0000" + std::to_string(rank) + ".safetensors");
    if (rank == 1) {
      EXPECT_TRUE(second.ok()) << "another rank's save: " << second;
      continue;
    }
    EXPECT_EQ(second.code(), absl::StatusCode::kAborted);
    EXPECT_THAT(std::string(second.message()), HasSubstr("injected crash of rank 0 during the save of step 2"));
    EXPECT_TRUE(Sync(*storage, dir, ".tmp-e-r00000.safetensors").ok()) << "once";
  }
}

// In a plain directory a save is known by its place in the Trainer's
// schedule (lightning::CheckpointsAfterStep), not by the step training has
// reached: a background save may fsync steps later. Every 3 steps of 10 from
// the start saves after 3, 6, 9 and 10; resumed at 6, after 9 and 10.
TEST(FaultInjectorTest, PlainSaveFaultsFollowTheSchedule) {
  const std::string dir = ::testing::TempDir() + "/fault_plan_schedule";
  std::filesystem::remove_all(dir);
  struct Case {
    const char* plan;
    int64_t start;
    int faulted_save;  // 1-based; 0: none
  };
  for (const Case& c : {Case{"save-crash:rank=0,step=10", 0, 4}, Case{"save-crash:rank=0,step=9", 0, 3},
                        Case{"save-crash:rank=0,step=10", 6, 2}, Case{"save-crash:rank=0,step=4", 0, 0}}) {
    std::filesystem::remove_all(dir);
    FaultInjector injector(*ParseFaultPlan(c.plan), std::chrono::milliseconds(100), 3);
    auto storage = injector.SaveStorage();
    ASSERT_TRUE(injector.OnTrainStart({0, 1, c.start, 10}).ok());
    // Training runs ahead of the saves: the step reached says nothing.
    EXPECT_TRUE(injector.OnStepEnd({0, 1, c.start, 10}, 10, 0.0).ok());
    for (int save = 1; save <= 5; ++save) {
      const absl::Status s = Sync(*storage, dir, ".tmp-" + std::to_string(save) + "-r00000.safetensors");
      EXPECT_EQ(s.ok(), save != c.faulted_save) << c.plan << " from " << c.start << ", save " << save << ": " << s;
    }
  }
}

// A background save of a root's step K may fsync when training is steps
// further: the step directory, not the last step, picks the save.
TEST(FaultInjectorTest, SaveFaultsFindTheirStepInARoot) {
  const std::string root = ::testing::TempDir() + "/fault_plan_root";
  std::filesystem::remove_all(root);
  lightning::TrainState rank1{1, 2, 0, 10};
  for (const char* text : {"save-crash:rank=1,step=2", "save-delay:rank=1,step=2,ms=300"}) {
    FaultInjector injector(*ParseFaultPlan(text), std::chrono::milliseconds(100), 1);
    auto storage = injector.SaveStorage();
    ASSERT_TRUE(injector.OnTrainStart(rank1).ok());
    auto sync = [&](const std::string& step_dir, const std::string& name) {
      EXPECT_TRUE(storage->MakeDirectories(root + "/" + step_dir).ok());
      auto file = sharded::checkpoint::File::CreateNew(*storage, root + "/" + step_dir + "/" + name);
      EXPECT_TRUE(file.ok()) << file.status();
      return file->Sync();
    };
    EXPECT_TRUE(injector.OnStepEnd(rank1, 2, 0.0).ok());
    EXPECT_TRUE(injector.OnStepEnd(rank1, 3, 0.0).ok());
    const std::string tag = std::string(text).substr(0, 10);
    EXPECT_TRUE(sync("step-000003", ".tmp-" + tag + "a-r00001.safetensors").ok()) << "wrong step";
    const auto start = std::chrono::steady_clock::now();
    const absl::Status faulted = sync("step-000002", ".tmp-" + tag + "b-r00001.safetensors");
    if (absl::string_view(text).substr(0, 10) == "save-crash") {
      EXPECT_EQ(faulted.code(), absl::StatusCode::kAborted) << faulted;
    } else {
      EXPECT_TRUE(faulted.ok()) << faulted;
      EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
    }
    EXPECT_TRUE(sync("step-000002", ".tmp-" + tag + "c-r00001.safetensors").ok()) << "a save fault happens once";
  }
}

}  // namespace
}  // namespace shardlight::simulate
