// Background saves: the values saved are those of the save's step although
// training changed them in place right after Save returned; a budget smaller
// than the state gives the same bytes as a synchronous save; training
// collectives run while saves are in flight (on the trainer's group, never
// the checkpointer's); every fault ends in bounded time on every rank with
// the failing rank's error and leaves the previous checkpoint committed.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sharded/agreement.h"
#include "sharded/checkpoint/async/async_checkpointer.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/format/checkpoint_reader.h"
#include "sharded/checkpoint/roots/checkpoint_root.h"
#include "sharded/checkpoint/save_protocol.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/storage/fault_injecting_storage.h"
#include "sharded/checkpoint/format/file_names.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded::checkpoint {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;
using testing::CheckState;
using testing::MakeState;
using testing::TensorSpec;

constexpr int64_t kSmallBudget = StagingArea::kMinBudgetBytes;  // 64 KiB: far below the state
constexpr int64_t kLargeBudget = int64_t{16} << 20;

// Rows [0, 2) and [3, 6) on rank 0, row [2, 3) on the last rank: two local
// shards on one rank, in metadata order, none on the ranks between.
EnumerableShardingSpec TwoOnRankZero(int world) {
  EnumerableShardingSpec spec;
  spec.shards.push_back({{0, 0}, {2, 4}, Placement::Cpu(0)});
  spec.shards.push_back({{2, 0}, {1, 4}, Placement::Cpu(world - 1)});
  spec.shards.push_back({{3, 0}, {3, 4}, Placement::Cpu(0)});
  return spec;
}

// Chunks of dim 1, the first on the last rank, the last on rank 0.
ChunkShardingSpec ReversedColumns(int world) {
  ChunkShardingSpec spec;
  spec.dim = 1;
  for (int r = world - 1; r >= 0; --r) spec.placements.push_back(Placement::Cpu(r));
  return spec;
}

// Uneven rows at W = 3 and 8; empty shards of "v" at W >= 4 (5 columns);
// "w" alone is 516 KB: more than the small budget on each rank up to W = 7.
// "e" and "r": the shard orders a snapshot must stage as the plan lists them
// (the writer plans after the snapshot and checks that it did).
std::vector<TensorSpec> Layout(int world) {
  return {{"w", {1001, 129}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(0, world)},
          {"v", {7, 5}, c10::ScalarType::Long, ChunkShardingSpec::OnRanks(1, world)},
          {"b", {33}, c10::ScalarType::BFloat16, std::nullopt},
          {"e", {6, 4}, c10::ScalarType::Float, TwoOnRankZero(world)},
          {"r", {3, 5}, c10::ScalarType::Double, ReversedColumns(world)},
          {"step", {}, c10::ScalarType::Long, std::nullopt}};
}

// What an optimizer does after the save: every tensor of `state` takes the
// values of `next`, in place.
void OverwriteInPlace(StateDict& state, const StateDict& next) {
  for (auto& [key, value] : state.entries()) {
    const StateValue* src = next.Find(key);
    if (auto* dense = std::get_if<at::Tensor>(&value)) {
      dense->copy_(std::get<at::Tensor>(*src));
    } else {
      const auto& mine = std::get<ShardedTensor>(value).local_shards();
      const auto& theirs = std::get<ShardedTensor>(*src).local_shards();
      for (size_t i = 0; i < mine.size(); ++i) mine[i].tensor.copy_(theirs[i].tensor);
    }
  }
}

absl::StatusOr<std::unique_ptr<AsyncCheckpointer>> MakeCheckpointer(RankContext& ctx, const std::string& location,
                                                                    AsyncCheckpointOptions options) {
  auto group = ctx.groups->Make("async_checkpoint");
  if (!group.ok()) return group.status();
  return AsyncCheckpointer::Create(location, *group, std::move(options));
}

// Loads the newest checkpoint at `location` (a root when keep_last > 0) and
// checks it holds the reference values of `salt`.
absl::Status CheckSaved(RankContext& ctx, const std::string& location, int keep_last, int salt,
                        std::shared_ptr<Storage> storage = nullptr) {
  SL_ASSIGN_OR_RETURN(StateDict loaded, MakeState(Layout(ctx.world_size), -1, ctx.pg));
  LoadOptions load;
  load.storage = std::move(storage);
  if (keep_last > 0) {
    SL_RETURN_IF_ERROR(LoadCheckpointFromRoot(loaded, location, *ctx.pg, load).status());
  } else {
    SL_RETURN_IF_ERROR(LoadCheckpoint(loaded, location, *ctx.pg, load));
  }
  return CheckState(loaded, salt);
}

struct Case {
  int world;
  int64_t budget;
};

class AsyncValuesTest : public ::testing::TestWithParam<Case> {};

TEST_P(AsyncValuesTest, SavedValuesAreThoseOfTheSaveStep) {
  const Case c = GetParam();
  const std::string root = testing::FreshDir(absl::StrCat("values_", c.world, "_", c.budget));
  SimulatedCluster cluster(c.world, testing::Options());
  ASSERT_TRUE(cluster.Run([&](RankContext& ctx) -> absl::Status {
    AsyncCheckpointOptions options;
    options.staging_budget_bytes = c.budget;
    options.keep_last = 2;
    SL_ASSIGN_OR_RETURN(auto checkpointer, MakeCheckpointer(ctx, root, options));
    SL_ASSIGN_OR_RETURN(StateDict state, MakeState(Layout(ctx.world_size), 1, ctx.pg));
    for (int step = 1; step <= 3; ++step) {
      SL_ASSIGN_OR_RETURN(auto handle, checkpointer->Save(state, step));
      // Training goes on at once: the next step's values, in place.
      SL_ASSIGN_OR_RETURN(StateDict next, MakeState(Layout(ctx.world_size), step + 1, ctx.pg));
      OverwriteInPlace(state, next);
      SL_RETURN_IF_ERROR(handle->Wait());
      if (handle->dir() != JoinPath(root, StepDirName(step))) return absl::InternalError(handle->dir());
      // The step just saved holds the values of its step, not the next one's.
      SL_RETURN_IF_ERROR(CheckSaved(ctx, root, options.keep_last, step));
    }
    if (checkpointer->staging_bytes() > c.budget) {
      return absl::InternalError(absl::StrCat("staging holds ", checkpointer->staging_bytes(), " > budget ", c.budget));
    }
    return absl::OkStatus();
  }).ok());
  // keep_last = 2: steps 2 and 3 remain.
  auto listing = ScanCheckpointRoot(root, PosixStorage());
  ASSERT_TRUE(listing.ok()) << listing.status();
  ASSERT_EQ(listing->steps.size(), 2u);
  EXPECT_EQ(listing->steps[0].step, 2);
  EXPECT_EQ(*listing->latest, 3);
}

INSTANTIATE_TEST_SUITE_P(WorldsAndBudgets, AsyncValuesTest,
                         ::testing::Values(Case{1, kSmallBudget}, Case{2, kLargeBudget}, Case{3, kSmallBudget},
                                           Case{4, kSmallBudget}, Case{4, kLargeBudget}, Case{8, kSmallBudget}),
                         [](const auto& info) {
                           return absl::StrCat("W", info.param.world, "_budget", info.param.budget >> 10, "KiB");
                         });

// The state dict's values (a step, a schedule's state) are saved too, as
// they were at the save's step.
TEST(AsyncCheckpointer, PlainValuesAreSavedAsOfTheSaveStep) {
  const std::string dir = testing::FreshDir("async_plain_values");
  SimulatedCluster cluster(2, testing::Options());
  ASSERT_TRUE(cluster.Run([&](RankContext& ctx) -> absl::Status {
    SL_ASSIGN_OR_RETURN(auto checkpointer, MakeCheckpointer(ctx, dir, AsyncCheckpointOptions()));
    SL_ASSIGN_OR_RETURN(StateDict state, MakeState(Layout(ctx.world_size), 1, ctx.pg));
    SL_RETURN_IF_ERROR(state.InsertValue("trainer.step", PlainValue::Int(7)));
    SL_ASSIGN_OR_RETURN(auto handle, checkpointer->Save(state, 7));
    state.SetValue("trainer.step", PlainValue::Int(8));  // training goes on
    return handle->Wait();
  }).ok());
  auto reader = CheckpointReader::Open(dir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const IndexValue* step = reader->index().FindValue("trainer.step");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->value, PlainValue::Int(7));
}

// Every rank's data file, by rank, byte for byte.
std::vector<std::string> DataFiles(const std::string& dir) {
  auto reader = CheckpointReader::Open(dir, PosixStorage());
  EXPECT_TRUE(reader.ok()) << reader.status();
  std::vector<IndexFile> files = reader->index().files;
  std::sort(files.begin(), files.end(), [](const IndexFile& a, const IndexFile& b) { return a.rank < b.rank; });
  std::vector<std::string> out;
  for (const IndexFile& f : files) {
    auto bytes = ReadWholeFile(PosixStorage(), JoinPath(dir, f.name), int64_t{1} << 30);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    out.push_back(bytes.ok() ? *bytes : "");
  }
  return out;
}

// What a snapshot stages (TensorsToWrite) is exactly what the writer's plan
// lists, in order, on every rank: two local shards on one rank, reversed
// placements, empty shards, ranks that write nothing but dense tensors.
TEST(AsyncCheckpointerTest, StagedTensorsAreThePlansEntries) {
  for (int world : {1, 3, 4, 8}) {
    SimulatedCluster cluster(world, testing::Options());
    ASSERT_TRUE(cluster.Run([&](RankContext& ctx) -> absl::Status {
      SL_ASSIGN_OR_RETURN(StateDict state, MakeState(Layout(ctx.world_size), 1, ctx.pg));
      SL_ASSIGN_OR_RETURN(SavePlan plan, PlanSave(state, ctx.rank, ctx.world_size));
      const std::vector<at::Tensor> staged = TensorsToWrite(state.entries(), ctx.rank);
      if (staged.size() != plan.entries.size()) {
        return absl::InternalError(absl::StrCat("rank ", ctx.rank, ": ", staged.size(), " staged, ",
                                                plan.entries.size(), " planned"));
      }
      for (size_t i = 0; i < staged.size(); ++i) {
        if (!staged[i].is_same(plan.entries[i].tensor)) {
          return absl::InternalError(absl::StrCat("rank ", ctx.rank, ": entry ", i, " (", plan.entries[i].name,
                                                  ") is not the staged tensor"));
        }
      }
      return absl::OkStatus();
    }).ok()) << "world " << world;
  }
}

TEST(AsyncCheckpointerTest, SmallBudgetGivesTheBytesOfASynchronousSave) {
  for (const int world : {3, 4}) {
    const std::string sync_dir = testing::FreshDir(absl::StrCat("sync_", world));
    const std::string async_dir = testing::FreshDir(absl::StrCat("async_", world));
    SimulatedCluster cluster(world, testing::Options());
    ASSERT_TRUE(cluster.Run([&](RankContext& ctx) -> absl::Status {
      SL_ASSIGN_OR_RETURN(StateDict state, MakeState(Layout(ctx.world_size), 5, ctx.pg));
      SL_RETURN_IF_ERROR(SaveCheckpoint(state, sync_dir, *ctx.pg));
      AsyncCheckpointOptions options;
      options.staging_budget_bytes = kSmallBudget;
      SL_ASSIGN_OR_RETURN(auto checkpointer, MakeCheckpointer(ctx, async_dir, options));
      SL_RETURN_IF_ERROR(checkpointer->Save(state, 5).status());
      return checkpointer->Wait();
    }).ok());
    const std::vector<std::string> sync_files = DataFiles(sync_dir);
    const std::vector<std::string> async_files = DataFiles(async_dir);
    ASSERT_EQ(sync_files.size(), static_cast<size_t>(world));
    ASSERT_EQ(async_files.size(), sync_files.size());
    for (size_t r = 0; r < sync_files.size(); ++r) {
      EXPECT_GT(sync_files[r].size(), 0u);
      EXPECT_TRUE(sync_files[r] == async_files[r]) << "rank " << r << "'s data file differs at W=" << world;
    }
    // Rank 0's file holds "w" rows, "b" and "step": more than the budget.
    EXPECT_GT(static_cast<int64_t>(sync_files[0].size()), kSmallBudget);
  }
}

// Training collectives on the trainer's group while saves run on the
// checkpointer's: neither waits for the other.
TEST(AsyncCheckpointerTest, TrainingCollectivesRunWhileSavesAreInFlight) {
  for (const int world : {2, 4, 8}) {
    const std::string root = testing::FreshDir(absl::StrCat("overlap_", world));
    SimulatedCluster cluster(world, testing::Options());
    const absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
      AsyncCheckpointOptions options;
      options.staging_budget_bytes = kSmallBudget;
      options.keep_last = 1;
      // Slow fsyncs keep every save in flight for a while.
      options.save.storage = std::make_shared<FaultInjectingStorage>(
          PosixStorage(), [](StorageOp op, const std::string&) {
            if (op == StorageOp::kSync) std::this_thread::sleep_for(std::chrono::milliseconds(100));
            return absl::OkStatus();
          });
      SL_ASSIGN_OR_RETURN(auto checkpointer, MakeCheckpointer(ctx, root, options));
      SL_ASSIGN_OR_RETURN(StateDict state, MakeState(Layout(ctx.world_size), 1, ctx.pg));
      int overlapped = 0;
      for (int step = 1; step <= 3; ++step) {
        SL_ASSIGN_OR_RETURN(auto handle, checkpointer->Save(state, step));
        // Allreduces and barriers until every rank's save has ended (and at
        // least a few): the saves' agreements and the training allreduces
        // run at the same time on different groups. The last element counts
        // the ranks whose save is in flight, so all ranks stop together.
        for (int i = 0; i < 200; ++i) {
          std::vector<at::Tensor> t = {at::ones({64})};
          t[0][63] = handle->Done() ? 0 : 1;
          ctx.pg->allreduce(t)->wait();
          if (t[0][0].item<float>() != static_cast<float>(ctx.world_size)) return absl::InternalError("bad allreduce");
          const bool any_in_flight = t[0][63].item<float>() > 0;
          if (any_in_flight) ++overlapped;
          if (i % 7 == 0) ctx.pg->barrier()->wait();
          if (i >= 5 && !any_in_flight) break;
        }
        SL_ASSIGN_OR_RETURN(StateDict next, MakeState(Layout(ctx.world_size), step + 1, ctx.pg));
        OverwriteInPlace(state, next);
      }
      SL_RETURN_IF_ERROR(checkpointer->Wait());
      SL_RETURN_IF_ERROR(CheckSaved(ctx, root, options.keep_last, 3));
      std::vector<at::Tensor> count = {at::full({1}, static_cast<double>(overlapped), at::kDouble)};
      ctx.pg->allreduce(count)->wait();
      if (count[0].item<double>() == 0) return absl::InternalError("no collective overlapped a save");
      return absl::OkStatus();
    });
    ASSERT_TRUE(status.ok()) << "W=" << world << ": " << status;
  }
}

TEST(AsyncCheckpointerTest, BadOptionsFailOnEveryRank) {
  SimulatedCluster cluster(3, testing::Options());
  const absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    AsyncCheckpointOptions options;
    options.staging_budget_bytes = ctx.rank == 1 ? 1000 : kSmallBudget;
    auto made = MakeCheckpointer(ctx, testing::FreshDir("bad_options"), options);
    if (made.ok()) return absl::InternalError("a budget of 1000 bytes was accepted");
    if (AgreedFailingRank(made.status()) != 1 || !absl::StrContains(made.status().message(), "staging_budget_bytes")) {
      return absl::InternalError(absl::StrCat("unexpected error: ", made.status().ToString()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

// One rank's bad input (an undefined tensor) fails the save on every rank,
// at Wait, naming that rank; the checkpointer saves again afterwards. The
// writer finds it when it plans, after the snapshot: with a budget below the
// state the snapshot is then still waiting for room, and must end too.
TEST(AsyncCheckpointerTest, BadInputOnOneRankFailsEveryRankAtWait) {
  for (const int64_t budget : {AsyncCheckpointOptions().staging_budget_bytes, kSmallBudget}) {
    for (const int bad_rank : {0, 2}) {
      const std::string dir = testing::FreshDir(absl::StrCat("bad_input_", budget, "_", bad_rank));
      SimulatedCluster cluster(3, testing::Options());
      const absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
        AsyncCheckpointOptions options;
        options.staging_budget_bytes = budget;
        SL_ASSIGN_OR_RETURN(auto checkpointer, MakeCheckpointer(ctx, dir, options));
        SL_ASSIGN_OR_RETURN(StateDict state, MakeState(Layout(ctx.world_size), 1, ctx.pg));
        StateDict bad = state;
        if (ctx.rank == bad_rank) bad.Set("step", at::Tensor());
        SL_ASSIGN_OR_RETURN(auto handle, checkpointer->Save(bad, 1));
        const absl::Status failed = handle->Wait();
        if (failed.ok() || AgreedFailingRank(failed) != bad_rank || !absl::StrContains(failed.message(), "undefined")) {
          return absl::InternalError(absl::StrCat("unexpected outcome: ", failed.ToString()));
        }
        SL_RETURN_IF_ERROR(checkpointer->Save(state, 2).status());
        SL_RETURN_IF_ERROR(checkpointer->Wait());
        return CheckSaved(ctx, dir, 0, 1);
      });
      EXPECT_TRUE(status.ok()) << "budget " << budget << ", bad rank " << bad_rank << ": " << status;
    }
  }
}

// A fault at one storage operation of one rank's background save.
struct Fault {
  const char* name;
  StorageOp op;
  const char* path_part;  // the operation's path contains this
  bool throws;            // an exception instead of an error status
  std::chrono::milliseconds delay;  // > 0: the operation is only slow (the save succeeds)
};

class AsyncFaultTest : public ::testing::TestWithParam<Fault> {};

TEST_P(AsyncFaultTest, EndsOnEveryRankWithThePreviousCheckpointIntact) {
  const Fault fault = GetParam();
  constexpr int kFaulty = 1;
  for (const int keep_last : {0, 2}) {
    for (const int world : {2, 3}) {
      const std::string location = testing::FreshDir(absl::StrCat("fault_", fault.name, "_", keep_last, "_", world));
      SimulatedCluster cluster(world, testing::Options());
      const auto start = std::chrono::steady_clock::now();
      const absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
        auto armed = std::make_shared<std::atomic<bool>>(false);
        AsyncCheckpointOptions options;
        options.staging_budget_bytes = kSmallBudget;
        options.keep_last = keep_last;
        if (ctx.rank == kFaulty) {
          options.save.storage = std::make_shared<FaultInjectingStorage>(
              PosixStorage(), [armed, fault](StorageOp op, const std::string& path) -> absl::Status {
                if (!*armed || op != fault.op || !absl::StrContains(path, fault.path_part)) return absl::OkStatus();
                *armed = false;  // once
                if (fault.delay.count() > 0) {
                  std::this_thread::sleep_for(fault.delay);
                  return absl::OkStatus();
                }
                if (fault.throws) throw std::runtime_error("injected exception");
                return absl::DataLossError(absl::StrCat("injected ", StorageOpName(op), " failure"));
              });
        }
        SL_ASSIGN_OR_RETURN(auto checkpointer, MakeCheckpointer(ctx, location, options));
        SL_ASSIGN_OR_RETURN(StateDict state, MakeState(Layout(ctx.world_size), 1, ctx.pg));
        SL_RETURN_IF_ERROR(checkpointer->Save(state, 1).status());
        SL_RETURN_IF_ERROR(checkpointer->Wait());
        *armed = true;
        SL_ASSIGN_OR_RETURN(StateDict next, MakeState(Layout(ctx.world_size), 2, ctx.pg));
        OverwriteInPlace(state, next);
        // The failure is reported by the next Save when nobody waited.
        SL_RETURN_IF_ERROR(checkpointer->Save(state, 2).status());
        const absl::StatusOr<std::shared_ptr<AsyncSaveHandle>> again = checkpointer->Save(state, 3);
        if (fault.delay.count() > 0) {
          SL_RETURN_IF_ERROR(again.status());
          SL_RETURN_IF_ERROR(checkpointer->Wait());
          return CheckSaved(ctx, location, keep_last, 2);
        }
        if (again.ok()) return absl::InternalError("the failed save was not reported by the next Save");
        if (AgreedFailingRank(again.status()) != kFaulty) {
          return absl::InternalError(absl::StrCat("the error does not name rank ", kFaulty, ": ", again.status().ToString()));
        }
        // The previous checkpoint is the committed one and loads.
        return CheckSaved(ctx, location, keep_last, 1);
      });
      EXPECT_TRUE(status.ok()) << fault.name << " keep_last=" << keep_last << " W=" << world << ": " << status;
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Faults, AsyncFaultTest,
    ::testing::Values(Fault{"create", StorageOp::kCreateNew, ".tmp", false, {}},
                      Fault{"write", StorageOp::kWrite, "", false, {}},
                      Fault{"write_throws", StorageOp::kWrite, "", true, {}},
                      Fault{"data_fsync", StorageOp::kSync, "", false, {}},
                      Fault{"rename", StorageOp::kRename, ".tmp", false, {}},
                      Fault{"delay", StorageOp::kWrite, "", false, std::chrono::milliseconds(300)}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace shardlight::sharded::checkpoint
