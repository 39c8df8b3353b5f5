// Crashes during a checkpoint-root save with retention (checkpoint_root.h):
// steps 1 and 2 saved with keep_last 2, then a save of step 3 (which also
// deletes step 1) whose storage fails at operation k -- only there, or from
// there on (a crash: nothing reaches the storage any more) -- for every k.
// Whatever k, the root keeps a `latest` naming a checkpoint that loads with
// no fallback, on every rank, and the next save succeeds and cleans up.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/roots/checkpoint_root.h"
#include "sharded/checkpoint/roots/checkpoint_root_testing.h"
#include "sharded/checkpoint/storage/fault_injecting_storage.h"
#include "sharded/checkpoint/storage/in_memory_storage.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded::checkpoint {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;

constexpr char kRoot[] = "r";
constexpr int kKeep = 2;

// The number of storage operations of the save of step 3.
int CountOperations(int world) {
  auto memory = std::make_shared<InMemoryStorage>();
  std::atomic<int> count{0};
  auto counting = std::make_shared<FaultInjectingStorage>(*memory, [&](StorageOp, const std::string&) {
    ++count;
    return absl::OkStatus();
  });
  SimulatedCluster cluster(world, testing::Options());
  const absl::Status run = cluster.Run([&](RankContext& ctx) -> absl::Status {
    for (int64_t step : {1, 2}) {
      const absl::Status s = testing::SaveStepHere(ctx.pg, kRoot, step, kKeep, memory);
      if (!s.ok()) return s;
    }
    return testing::SaveStepHere(ctx.pg, kRoot, 3, kKeep, counting);
  });
  EXPECT_TRUE(run.ok()) << run;
  return count.load();
}

// One cluster per fault: set up, the faulty save, then the checks.
void FaultAtEveryOperation(int world, bool crash, int stride = 1) {
  const int count = CountOperations(world);
  ASSERT_GT(count, 20);
  for (int k = 0; k < count; k += stride) {
    SCOPED_TRACE(absl::StrCat("world ", world, ", fault at operation ", k, " of ", count, crash ? " and after" : " only"));
    auto memory = std::make_shared<InMemoryStorage>();
    std::atomic<int> seen{0};
    auto faulty = std::make_shared<FaultInjectingStorage>(*memory, [&](StorageOp op, const std::string& path) {
      const int i = seen++;
      if (i == k || (crash && i > k)) return absl::ResourceExhaustedError(absl::StrCat("injected at ", StorageOpName(op), " ", path));
      return absl::OkStatus();
    });
    std::vector<int64_t> loaded_step(world, -1);
    SimulatedCluster cluster(world, testing::Options());
    const absl::Status run = cluster.Run([&](RankContext& ctx) -> absl::Status {
      for (int64_t step : {1, 2}) {
        const absl::Status s = testing::SaveStepHere(ctx.pg, kRoot, step, kKeep, memory);
        if (!s.ok()) return s;
      }
      testing::SaveStepHere(ctx.pg, kRoot, 3, kKeep, faulty).IgnoreError();  // fails or not, depending on k
      absl::StatusOr<RootLoadResult> loaded = testing::LoadRootHere(ctx.pg, kRoot, memory);
      if (!loaded.ok()) return loaded.status();
      if (!loaded->fallbacks.empty()) return absl::InternalError(loaded->Message());
      loaded_step[ctx.rank] = loaded->step;
      return testing::SaveStepHere(ctx.pg, kRoot, 4, kKeep, memory);
    });
    ASSERT_TRUE(run.ok()) << run;
    for (int r = 0; r < world; ++r) EXPECT_EQ(loaded_step[r], loaded_step[0]);
    EXPECT_GE(loaded_step[0], 2) << "the newest good checkpoint loads";
    auto listing = ScanCheckpointRoot(kRoot, *memory);
    ASSERT_TRUE(listing.ok()) << listing.status();
    ASSERT_EQ(listing->steps.size(), 2u) << "retention after the next save leaves keep_last steps, no leftovers";
    EXPECT_EQ(listing->steps[1].step, 4);
    EXPECT_TRUE(listing->steps[0].committed);
    EXPECT_EQ(listing->latest, 4);
  }
}

TEST(CheckpointRootCrashTest, OneRankCrashesAtEveryOperation) { FaultAtEveryOperation(1, /*crash=*/true); }
TEST(CheckpointRootCrashTest, OneRankFailsEveryOperationOnce) { FaultAtEveryOperation(1, /*crash=*/false); }
TEST(CheckpointRootCrashTest, ThreeRanksCrashAtEveryOperation) { FaultAtEveryOperation(3, /*crash=*/true); }
TEST(CheckpointRootCrashTest, TwoRanksFailEveryOtherOperationOnce) { FaultAtEveryOperation(2, /*crash=*/false, 2); }

}  // namespace
}  // namespace shardlight::sharded::checkpoint
