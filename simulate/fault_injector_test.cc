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
  FaultInjector crash(*ParseFaultPlan("crash:rank=1,step=3"), std::chrono::milliseconds(100));
  lightning::TrainState rank0{0, 2, 0, 10}, rank1{1, 2, 0, 10};
  EXPECT_TRUE(crash.OnStepEnd(rank0, 3, 0.0).ok());
  EXPECT_TRUE(crash.OnStepEnd(rank1, 2, 0.0).ok());
  absl::Status s = crash.OnStepEnd(rank1, 3, 0.0);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(), "injected crash of rank 1 after step 3");

  // save-crash: the storage fails the fsync of rank 0's temporary data file
  // in the save after step 2, and nothing else.
  const std::string dir = ::testing::TempDir() + "/fault_plan_save";
  std::filesystem::remove_all(dir);
  FaultInjector save(*ParseFaultPlan("save-crash:rank=0,step=2"), std::chrono::milliseconds(100));
  auto storage = save.SaveStorage();
  ASSERT_TRUE(storage->MakeDirectories(dir).ok());
  auto sync = [&](const std::string& name) {
    auto file = sharded::checkpoint::File::CreateNew(*storage, dir + "/" + name);
    EXPECT_TRUE(file.ok()) << file.status();
    return file->Sync();
  };
  EXPECT_TRUE(save.OnStepEnd(rank0, 1, 0.0).ok());
  EXPECT_TRUE(sync(".tmp-a-r00000.safetensors").ok()) << "wrong step";
  EXPECT_TRUE(save.OnStepEnd(rank1, 2, 0.0).ok());
  EXPECT_TRUE(sync(".tmp-b-r00001.safetensors").ok()) << "wrong rank";
  EXPECT_TRUE(save.OnStepEnd(rank0, 2, 0.0).ok());
  EXPECT_TRUE(sync(".tmp-c-index.json").ok()) << "wrong file";
  EXPECT_TRUE(storage->SyncDirectory(dir).ok()) << "wrong operation";
  const absl::Status crashed = sync(".tmp-d-r00000.safetensors");
  EXPECT_EQ(crashed.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(crashed.message()), HasSubstr("injected crash of rank 0 during the save of step 2"));
}

// A background save of a root's step K may fsync when training is steps
// further: the step directory, not the last step, picks the save.
TEST(FaultInjectorTest, SaveFaultsFindTheirStepInARoot) {
  const std::string root = ::testing::TempDir() + "/fault_plan_root";
  std::filesystem::remove_all(root);
  lightning::TrainState rank1{1, 2, 0, 10};
  for (const char* text : {"save-crash:rank=1,step=2", "save-delay:rank=1,step=2,ms=300"}) {
    FaultInjector injector(*ParseFaultPlan(text), std::chrono::milliseconds(100));
    auto storage = injector.SaveStorage();
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
