// A save that fails part-way -- a rank whose storage returns an error or
// throws at any point of the protocol -- commits nothing: the previous checkpoint stays loadable, the new
// one is invisible, no temporary file is left, and every rank returns the
// same error naming the failing rank, without waiting for a timeout.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/storage/fault_injecting_storage.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/storage/posix_file.h"
#include "simulate/core/simulated_cluster.h"

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

enum class How { kFails, kThrows, kThrowsTorchError };

// Where in the save the failing rank's storage fails.
enum class Point {
  kDataSync,     // the fsync of this rank's temporary data file
  kDataDirSync,  // the directory fsync after this rank's data file is renamed
  kIndexRename,  // rank 0: the rename of the written temporary index (the commit)
  kIndexDirSync, // rank 0: the directory fsync after index.json is renamed
};

struct Fault {
  Point point;
  int rank;
  How how;
};

const char* PointName(Point point) {
  switch (point) {
    case Point::kDataSync:
      return "DataSync";
    case Point::kDataDirSync:
      return "DataDirSync";
    case Point::kIndexRename:
      return "IndexRename";
    case Point::kIndexDirSync:
      return "IndexDirSync";
  }
  return "?";
}

std::string Describe(const Fault& f) {
  const char* how = f.how == How::kFails ? "_fails" : f.how == How::kThrows ? "_throws" : "_throws_torch";
  return absl::StrCat(PointName(f.point), "_rank", f.rank, how);
}

void PrintTo(const Fault& f, std::ostream* os) { *os << Describe(f); }

bool IsTempData(const std::string& path) {
  return absl::StrContains(path, "/.tmp-") && absl::EndsWith(path, ".safetensors");
}
bool IsTempIndex(const std::string& path) { return absl::StrContains(path, "/.tmp-") && absl::EndsWith(path, "-index.json"); }

// Rank `rank`'s options: its own storage, failing at `fault` when it is that
// rank's; then every rank's error says ExpectedError after "failed on rank R: ".
SaveOptions FaultyOptions(const Fault& fault, int rank) {
  SaveOptions options;
  if (rank != fault.rank) return options;
  auto renamed_index = std::make_shared<bool>(false);
  options.storage = std::make_shared<FaultInjectingStorage>(
      PosixStorage(), [fault, renamed_index](StorageOp op, const std::string& path) -> absl::Status {
        bool hit = false;
        switch (fault.point) {
          case Point::kDataSync:
            hit = op == StorageOp::kSync && IsTempData(path);
            break;
          case Point::kDataDirSync:  // the save's first directory fsync
            hit = op == StorageOp::kSyncDirectory;
            break;
          case Point::kIndexRename:
            hit = op == StorageOp::kRename && IsTempIndex(path);
            break;
          case Point::kIndexDirSync:
            hit = op == StorageOp::kSyncDirectory && *renamed_index;
            if (op == StorageOp::kRename && IsTempIndex(path)) *renamed_index = true;
            break;
        }
        if (!hit) return absl::OkStatus();
        if (fault.how == How::kThrows) throw std::runtime_error("injected crash");
        TORCH_CHECK(fault.how != How::kThrowsTorchError, "injected torch error");
        return absl::ResourceExhaustedError("injected: disk full");
      });
  return options;
}

std::string ExpectedError(const Fault& fault) {
  return fault.how == How::kFails    ? "injected: disk full"
         : fault.how == How::kThrows ? "exception: injected crash"
                                     : "LibTorch error: injected torch error";
}

// Saves kNew with `fault` on kWorld ranks; every rank's own answer. The save
// must end well before the collective timeout: no rank waits for a peer
// that gave up.
std::vector<absl::Status> FaultySave(const std::string& dir, const Fault& fault) {
  SimulatedCluster cluster(kWorld, testing::Options());
  std::vector<absl::Status> per_rank(kWorld);
  const auto start = std::chrono::steady_clock::now();
  absl::Status run = cluster.Run([&](RankContext& ctx) -> absl::Status {
    auto state = MakeState(Layout(), kNew, ctx.pg);
    if (!state.ok()) return state.status();
    per_rank[ctx.rank] = SaveCheckpoint(*state, dir, *ctx.pg, FaultyOptions(fault, ctx.rank));
    return absl::OkStatus();  // collect every rank's own answer
  });
  EXPECT_TRUE(run.ok()) << "a rank did not return (an exception escaped?): " << run;
  EXPECT_LT(std::chrono::steady_clock::now() - start, testing::Options().collective_timeout);
  return per_rank;
}

std::vector<std::string> TempFiles(const std::string& dir) {
  std::vector<std::string> out;
  for (const std::string& name : Names(dir)) {
    if (absl::StartsWith(name, ".tmp-")) out.push_back(name);
  }
  return out;
}

class FailedSaveTest : public ::testing::TestWithParam<Fault> {};

TEST_P(FailedSaveTest, PreviousCheckpointSurvivesAndTheNewOneIsInvisible) {
  const Fault fault = GetParam();
  const std::string dir = testing::FreshDir(Describe(fault));
  absl::Status saved = Save(dir, kWorld, kOld);
  ASSERT_TRUE(saved.ok()) << saved;
  const std::string index_before = testing::FileContents(JoinPath(dir, kIndexFileName));
  const std::vector<std::string> files_before = Names(dir);

  // A status or an exception: every rank returns the same error, naming the
  // failing rank.
  const std::vector<absl::Status> per_rank = FaultySave(dir, fault);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(per_rank[r].code(), fault.how == How::kFails ? absl::StatusCode::kResourceExhausted
                                                           : absl::StatusCode::kInternal)
        << "rank " << r << ": " << per_rank[r];
    EXPECT_EQ(per_rank[r].message(), per_rank[0].message());
    EXPECT_THAT(std::string(per_rank[r].message()),
                HasSubstr(absl::StrCat("failed on rank ", fault.rank, ": ", ExpectedError(fault))));
  }

  // Nothing was committed: the index is byte-identical and still loads, at
  // the old world size and another one.
  EXPECT_EQ(testing::FileContents(JoinPath(dir, kIndexFileName)), index_before);
  absl::Status loaded = LoadAndCheck(dir, kWorld, kOld);
  EXPECT_TRUE(loaded.ok()) << loaded;
  loaded = LoadAndCheck(dir, 3, kOld);
  EXPECT_TRUE(loaded.ok()) << loaded;
  // Temporary files are gone; files renamed before the failure may remain,
  // unreferenced.
  EXPECT_THAT(TempFiles(dir), ::testing::IsEmpty());
  if (fault.point == Point::kDataSync) {
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
                         ::testing::Values(Fault{Point::kDataSync, 2, How::kThrows},
                                           Fault{Point::kDataSync, 1, How::kFails},
                                           Fault{Point::kDataSync, 3, How::kThrowsTorchError},
                                           Fault{Point::kDataDirSync, 3, How::kThrows},
                                           Fault{Point::kDataDirSync, 0, How::kFails},
                                           Fault{Point::kDataDirSync, 1, How::kThrowsTorchError},
                                           Fault{Point::kIndexRename, 0, How::kThrows},
                                           Fault{Point::kIndexRename, 0, How::kFails}),
                         [](const auto& info) { return Describe(info.param); });

// A failure after the commit point (the directory fsync after the index
// rename): the new checkpoint is in place, but the
// rename may not be durable, so the previous checkpoint's files are kept for
// the old index that a crash could bring back.
class NotDurableTest : public ::testing::TestWithParam<How> {};

TEST_P(NotDurableTest, CommittedButOldFilesKept) {
  const Fault fault{Point::kIndexDirSync, 0, GetParam()};
  const std::string dir = testing::FreshDir(Describe(fault));
  absl::Status saved = Save(dir, kWorld, kOld);
  ASSERT_TRUE(saved.ok()) << saved;
  const std::string index_before = testing::FileContents(JoinPath(dir, kIndexFileName));
  const std::vector<std::string> files_before = Names(dir);

  const std::vector<absl::Status> per_rank = FaultySave(dir, fault);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_FALSE(per_rank[r].ok()) << "rank " << r;
    EXPECT_EQ(per_rank[r].message(), per_rank[0].message());
    EXPECT_THAT(std::string(per_rank[r].message()),
                HasSubstr(absl::StrCat("failed on rank 0: the new checkpoint is committed (index.json was renamed "
                                       "into place) but may not be durable: ",
                                       ExpectedError(fault), "; the previous checkpoint's files were kept")));
  }
  EXPECT_NE(testing::FileContents(JoinPath(dir, kIndexFileName)), index_before);
  absl::Status loaded = LoadAndCheck(dir, 3, kNew);
  EXPECT_TRUE(loaded.ok()) << loaded;
  const std::vector<std::string> files_after = Names(dir);
  for (const std::string& name : files_before) {
    EXPECT_TRUE(std::binary_search(files_after.begin(), files_after.end(), name)) << name << " was removed";
  }
  EXPECT_EQ(files_after.size(), 2 * files_before.size() - 1);  // one index, both generations' data
  EXPECT_THAT(TempFiles(dir), ::testing::IsEmpty());

  saved = Save(dir, 2, kNew + 1);  // a durable commit clears the old generation
  ASSERT_TRUE(saved.ok()) << saved;
  EXPECT_EQ(Names(dir).size(), 3u);
}

INSTANTIATE_TEST_SUITE_P(Faults, NotDurableTest, ::testing::Values(How::kFails, How::kThrows),
                         [](const auto& info) { return std::string(info.param == How::kFails ? "fails" : "throws"); });

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
