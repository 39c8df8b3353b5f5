// A save that fails part-way -- a rank that throws (the simulator kills its
// process group) or returns an error at any stage -- commits nothing: the
// previous checkpoint stays loadable, the new one is invisible, and every
// rank that returns reports the failing rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/index.h"
#include "sharded/checkpoint/posix_file.h"
#include "simulate/simulated_cluster.h"

namespace shardlight::sharded::checkpoint {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;
using testing::MakeState;
using testing::TensorSpec;
using ::testing::HasSubstr;

constexpr int kWorld = 4;
constexpr int kOld = 1;  // salt of the committed checkpoint
constexpr int kNew = 2;  // salt of the save that fails

std::vector<TensorSpec> Layout(int world = kWorld) {
  return {{"w", {37, 8}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(0, world)},
          {"v", {5, 3}, c10::ScalarType::Long, ChunkShardingSpec::OnRanks(1, world)},
          {"step", {}, c10::ScalarType::Long, std::nullopt}};
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> Names(const std::string& dir) {
  auto names = ListDirectory(dir);
  EXPECT_TRUE(names.ok());
  std::sort(names->begin(), names->end());
  return *names;
}

absl::Status Save(const std::string& dir, int world, int salt, const SaveOptions& options = {}) {
  SimulatedCluster cluster(world, testing::Options());
  return cluster.Run([&](RankContext& ctx) -> absl::Status {
    auto state = MakeState(Layout(world), salt, ctx.pg);
    if (!state.ok()) return state.status();
    return SaveCheckpoint(*state, dir, *ctx.pg, options);
  });
}

// Loads at `world` and checks the values are those of `salt`.
absl::Status LoadAndCheck(const std::string& dir, int world, int salt) {
  std::vector<TensorSpec> layout = Layout(world);
  layout[1].spec = ChunkShardingSpec::OnRanks(0, world);  // reloaded by rows, saved by columns
  SimulatedCluster cluster(world, testing::Options());
  return cluster.Run([&](RankContext& ctx) -> absl::Status {
    auto state = MakeState(layout, -1, ctx.pg);
    if (!state.ok()) return state.status();
    absl::Status s = LoadCheckpoint(*state, dir, *ctx.pg);
    if (!s.ok()) return s;
    return testing::CheckState(*state, salt);
  });
}

struct Fault {
  SaveStage stage;
  int rank;
  bool throws;  // else returns an error status
};

std::string Describe(const Fault& f) {
  const char* stage = f.stage == SaveStage::kDataWritten   ? "DataWritten"
                      : f.stage == SaveStage::kDataRenamed ? "DataRenamed"
                                                           : "IndexWritten";
  return absl::StrCat(stage, "_rank", f.rank, f.throws ? "_throws" : "_fails");
}

class FailedSaveTest : public ::testing::TestWithParam<Fault> {};

TEST_P(FailedSaveTest, PreviousCheckpointSurvivesAndTheNewOneIsInvisible) {
  const Fault fault = GetParam();
  const std::string dir = testing::FreshDir(Describe(fault));
  absl::Status saved = Save(dir, kWorld, kOld);
  ASSERT_TRUE(saved.ok()) << saved;
  const std::string index_before = ReadText(JoinPath(dir, kIndexFileName));
  const std::vector<std::string> files_before = Names(dir);

  SaveOptions options;
  options.fault_hook = [&](SaveStage stage, int rank) -> absl::Status {
    if (stage != fault.stage || rank != fault.rank) return absl::OkStatus();
    if (fault.throws) throw std::runtime_error("injected crash");
    return absl::ResourceExhaustedError("injected: disk full");
  };
  SimulatedCluster cluster(kWorld, testing::Options());
  std::vector<absl::Status> per_rank(kWorld);
  absl::Status run = cluster.Run([&](RankContext& ctx) -> absl::Status {
    auto state = MakeState(Layout(), kNew, ctx.pg);
    if (!state.ok()) return state.status();
    per_rank[ctx.rank] = SaveCheckpoint(*state, dir, *ctx.pg, options);
    return absl::OkStatus();  // collect every rank's own answer
  });
  if (fault.throws) {
    // The simulator reports the rank that died; the others were released.
    ASSERT_FALSE(run.ok());
    EXPECT_EQ(simulate::FailedRank(run), fault.rank) << run;
    EXPECT_THAT(std::string(run.message()), HasSubstr("injected crash"));
    for (int r = 0; r < kWorld; ++r) {
      if (r != fault.rank) {
        EXPECT_FALSE(per_rank[r].ok()) << "rank " << r << " reported success";
      }
    }
  } else {
    ASSERT_TRUE(run.ok()) << run;
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_EQ(per_rank[r].code(), absl::StatusCode::kResourceExhausted) << "rank " << r << ": " << per_rank[r];
      EXPECT_EQ(per_rank[r].message(), per_rank[0].message());
      EXPECT_THAT(std::string(per_rank[r].message()),
                  HasSubstr(absl::StrCat("failed on rank ", fault.rank, ": injected: disk full")));
    }
  }

  // Nothing was committed: the index is byte-identical and still loads, at
  // the old world size and another one.
  EXPECT_EQ(ReadText(JoinPath(dir, kIndexFileName)), index_before);
  absl::Status loaded = LoadAndCheck(dir, kWorld, kOld);
  EXPECT_TRUE(loaded.ok()) << loaded;
  loaded = LoadAndCheck(dir, 3, kOld);
  EXPECT_TRUE(loaded.ok()) << loaded;
  // Temporary files are gone; files renamed before the failure may remain,
  // unreferenced.
  for (const std::string& name : Names(dir)) EXPECT_FALSE(absl::StartsWith(name, ".tmp-")) << name;
  if (fault.stage == SaveStage::kDataWritten) {
    EXPECT_EQ(Names(dir), files_before);
  }

  // The next save commits and clears every leftover.
  saved = Save(dir, 2, kNew + 1);
  ASSERT_TRUE(saved.ok()) << saved;
  loaded = LoadAndCheck(dir, 3, kNew + 1);
  EXPECT_TRUE(loaded.ok()) << loaded;
  EXPECT_EQ(Names(dir).size(), 3u);  // index.json + 2 data files
}

INSTANTIATE_TEST_SUITE_P(Faults, FailedSaveTest,
                         ::testing::Values(Fault{SaveStage::kDataWritten, 2, true},
                                           Fault{SaveStage::kDataWritten, 1, false},
                                           Fault{SaveStage::kDataRenamed, 3, true},
                                           Fault{SaveStage::kDataRenamed, 0, false},
                                           Fault{SaveStage::kIndexWritten, 0, true},
                                           Fault{SaveStage::kIndexWritten, 0, false}),
                         [](const auto& info) { return Describe(info.param); });

// A directory a rank cannot write into fails the save everywhere, naming it.
TEST(FailedSaveTest, UnwritableDirectoryNamesTheRankAndPath) {
  const std::string parent = testing::FreshDir("unwritable");
  const std::string blocker = JoinPath(parent, "file");
  std::ofstream(blocker) << "not a directory";
  SimulatedCluster cluster(2, testing::Options());
  auto messages = cluster.Run([&](RankContext& ctx) -> std::string {
    StateDict state;
    state.Set("x", at::ones({3}));
    // Rank 1 is pointed below a plain file: mkdir fails there only.
    const std::string dir = ctx.rank == 1 ? JoinPath(blocker, "ckpt") : JoinPath(parent, "ckpt");
    return std::string(SaveCheckpoint(state, dir, *ctx.pg).message());
  });
  ASSERT_TRUE(messages.ok()) << messages.status();
  for (const std::string& m : *messages) {
    EXPECT_THAT(m, HasSubstr("failed on rank 1"));
    EXPECT_THAT(m, HasSubstr("cannot create directory"));
  }
  EXPECT_FALSE(PathExists(JoinPath(JoinPath(parent, "ckpt"), kIndexFileName)));
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint
