#include "simulate/fault_injector.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace shardlight::simulate
