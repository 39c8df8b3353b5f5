// The storage seam: a checkpoint saved into and loaded from InMemoryStorage
// touches no disk and reshards like one on POSIX; InMemoryStorage keeps
// PosixStorage's contract (exclusive create, OutOfRange at the end, atomic
// rename, listing); FaultInjectingStorage fails exactly the operations its
// fault function names, and a failed save leaves no file behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>

#include "absl/strings/match.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/storage/fault_injecting_storage.h"
#include "sharded/checkpoint/storage/in_memory_storage.h"
#include "sharded/checkpoint/storage/storage.h"
#include "sharded/checkpoint/storage/storage_contract.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded::checkpoint {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;
using testing::MakeState;
using testing::TensorSpec;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<TensorSpec> Layout(int world) {
  return {{"w", {13, 5}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(0, world)},
          {"step", {}, c10::ScalarType::Long, std::nullopt}};
}

std::vector<std::string> Sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

absl::Status Save(const std::shared_ptr<Storage>& storage, const std::string& dir, int world, int salt) {
  SaveOptions options;
  options.storage = storage;
  SimulatedCluster cluster(world, testing::Options());
  return cluster.Run([&](RankContext& ctx) -> absl::Status {
    auto state = MakeState(Layout(world), salt, ctx.pg);
    if (!state.ok()) return state.status();
    return SaveCheckpoint(*state, dir, *ctx.pg, options);
  });
}

absl::Status LoadAndCheck(const std::shared_ptr<Storage>& storage, const std::string& dir, int world, int salt) {
  LoadOptions options;
  options.storage = storage;
  SimulatedCluster cluster(world, testing::Options());
  return cluster.Run([&](RankContext& ctx) -> absl::Status {
    auto state = MakeState(Layout(world), -1, ctx.pg);
    if (!state.ok()) return state.status();
    absl::Status s = LoadCheckpoint(*state, dir, *ctx.pg, options);
    if (!s.ok()) return s;
    return testing::CheckState(*state, salt);
  });
}

TEST(InMemoryStorageTest, CheckpointRoundTripsWithoutTouchingTheDisk) {
  auto memory = std::make_shared<InMemoryStorage>();
  const std::string dir = testing::FreshDir("in_memory") + "/ckpt";
  ASSERT_TRUE(Save(memory, dir, 4, 1).ok());
  EXPECT_FALSE(std::filesystem::exists(dir));
  EXPECT_TRUE(HasCommittedCheckpoint(dir, memory.get()));
  EXPECT_FALSE(HasCommittedCheckpoint(dir));  // POSIX sees nothing
  // index.json + 4 data files, no temporary file.
  const std::vector<std::string> paths = memory->Paths();
  EXPECT_EQ(paths.size(), 5u);
  for (const std::string& p : paths) EXPECT_FALSE(absl::StrContains(p, "/.tmp-")) << p;
  absl::Status loaded = LoadAndCheck(memory, dir, 3, 1);
  EXPECT_TRUE(loaded.ok()) << loaded;
  // A second save replaces the first and removes its files.
  ASSERT_TRUE(Save(memory, dir, 2, 2).ok());
  EXPECT_EQ(memory->Paths().size(), 3u);
  loaded = LoadAndCheck(memory, dir, 4, 2);
  EXPECT_TRUE(loaded.ok()) << loaded;
}

TEST(InMemoryStorageTest, KeepsThePosixContract) {
  InMemoryStorage s;
  EXPECT_TRUE(absl::IsNotFound(s.CreateNew("d/a").status())) << "no directory yet";
  ASSERT_TRUE(s.MakeDirectories("d/e").ok());
  EXPECT_TRUE(s.Exists("d"));
  auto f = File::CreateNew(s, "d/a");
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(f->WriteAt("hello", 5, 0).ok());
  ASSERT_TRUE(f->WriteAt("!", 1, 7).ok());
  EXPECT_EQ(*f->Size(), 8);
  EXPECT_TRUE(absl::IsAlreadyExists(s.CreateNew("d/a").status()));
  auto text = ReadWholeFile(s, "d/a", 100);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, std::string("hello\0\0!", 8));
  auto r = File::OpenForRead(s, "d/a");
  char buffer[4];
  const absl::Status past = r->ReadAt(buffer, 4, 6);
  EXPECT_TRUE(absl::IsOutOfRange(past)) << past;
  EXPECT_THAT(std::string(past.message()), HasSubstr("ends at byte 8"));
  EXPECT_FALSE(ReadWholeFile(s, "d/a", 7).ok()) << "larger than the limit";
  ASSERT_TRUE(s.Rename("d/a", "d/b").ok());
  EXPECT_FALSE(s.Exists("d/a"));
  EXPECT_THAT(Sorted(*s.List("d")), ElementsAre("b", "e")) << "files and subdirectories";
  EXPECT_TRUE(absl::IsNotFound(s.Rename("d/a", "d/c")));
  ASSERT_TRUE(s.Remove("d/b").ok());
  EXPECT_TRUE(s.Remove("d/b").ok()) << "a missing file is fine";
  EXPECT_THAT(*s.List("d"), ElementsAre("e"));
  EXPECT_TRUE(absl::IsNotFound(s.List("nope").status()));
}

// Both implementations list subdirectories and remove an empty directory
// (a checkpoint root's retention needs both), but never a full one.
TEST(InMemoryStorageTest, ListsAndRemovesDirectoriesLikePosix) {
  InMemoryStorage memory;
  ExpectDirectoryContract(memory, "m");
  ExpectDirectoryContract(PosixStorage(), testing::FreshDir("posix_dirs"));
}

TEST(FaultInjectingStorageTest, FailsOnlyTheNamedOperationAndTheSaveLeavesNothing) {
  auto memory = std::make_shared<InMemoryStorage>();
  std::vector<std::string> seen;
  std::mutex mu;
  auto faulty = std::make_shared<FaultInjectingStorage>(*memory, [&](StorageOp op, const std::string& path) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(StorageOpName(op));
    if (op == StorageOp::kWrite && absl::StrContains(path, "r00001")) {
      return absl::ResourceExhaustedError("injected: disk full");
    }
    return absl::OkStatus();
  });
  const absl::Status saved = Save(faulty, "/ckpt", 2, 1);
  EXPECT_TRUE(absl::IsResourceExhausted(saved)) << saved;
  EXPECT_THAT(std::string(saved.message()), HasSubstr("failed on rank 1: injected: disk full"));
  EXPECT_TRUE(memory->Paths().empty()) << "rank 0's temporary file was removed too";
  EXPECT_FALSE(HasCommittedCheckpoint("/ckpt", faulty.get()));
  // The wrapper saw the protocol's operations; without the fault it commits.
  EXPECT_NE(std::find(seen.begin(), seen.end(), "mkdir"), seen.end());
  EXPECT_NE(std::find(seen.begin(), seen.end(), "fsync"), seen.end());
  auto clean = std::make_shared<FaultInjectingStorage>(
      *memory, [](StorageOp, const std::string&) { return absl::OkStatus(); });
  ASSERT_TRUE(Save(clean, "/ckpt", 2, 1).ok());
  const absl::Status loaded = LoadAndCheck(clean, "/ckpt", 3, 1);
  EXPECT_TRUE(loaded.ok()) << loaded;
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint
