// Checkpoint roots (checkpoint_root.h) on the simulated cluster: step
// directories, `latest`, keep_last retention, fallback to an older step when
// the newest fails verification, bad input that names itself and deletes
// nothing. Crashes: checkpoint_root_crash_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/roots/checkpoint_root.h"
#include "sharded/checkpoint/roots/checkpoint_root_testing.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/storage/posix_file.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded::checkpoint {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;
using testing::MakeState;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Saves step `step` on `world` ranks; every rank's answer.
std::vector<absl::Status> SaveStep(const std::string& root, int64_t step, int world, int keep_last) {
  std::vector<absl::Status> per_rank(world);
  SimulatedCluster cluster(world, testing::Options());
  const absl::Status run = cluster.Run([&](RankContext& ctx) -> absl::Status {
    per_rank[ctx.rank] = testing::SaveStepHere(ctx.pg, root, step, keep_last);
    return absl::OkStatus();
  });
  EXPECT_TRUE(run.ok()) << run;
  return per_rank;
}

absl::Status SaveOk(const std::string& root, int64_t step, int world, int keep_last) {
  for (const absl::Status& s : SaveStep(root, step, world, keep_last)) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// Loads the root on `world` ranks (values checked); rank 0's result, which
// every rank's must match.
absl::StatusOr<RootLoadResult> LoadRoot(const std::string& root, int world,
                                        std::shared_ptr<Storage> storage = nullptr) {
  std::vector<absl::StatusOr<RootLoadResult>> per_rank(world, absl::UnknownError("not run"));
  SimulatedCluster cluster(world, testing::Options());
  const absl::Status run = cluster.Run([&](RankContext& ctx) -> absl::Status {
    per_rank[ctx.rank] = testing::LoadRootHere(ctx.pg, root, storage);
    return absl::IsInternal(per_rank[ctx.rank].status()) ? per_rank[ctx.rank].status() : absl::OkStatus();
  });
  if (!run.ok()) return run;
  for (int r = 1; r < world; ++r) {
    if (per_rank[r].status() != per_rank[0].status() || (per_rank[r].ok() && per_rank[r]->step != per_rank[0]->step)) {
      return absl::InternalError(absl::StrCat("rank ", r, " disagrees with rank 0"));
    }
  }
  return per_rank[0];
}

std::vector<std::string> Sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<std::string> Names(Storage& storage, const std::string& dir) { return Sorted(*storage.List(dir)); }

std::string ReadLatest(const std::string& root) {
  std::ifstream in(JoinPath(root, kLatestFileName));
  std::string line;
  std::getline(in, line);
  return line;
}

// A data file of a step directory (the first one listed).
std::string SomeDataFile(const std::string& dir) {
  for (const std::string& name : Names(PosixStorage(), dir)) {
    if (absl::StartsWith(name, "data-")) return JoinPath(dir, name);
  }
  return "";
}

void FlipByteAtEnd(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-2, std::ios::end);
  char c = 0;
  f.get(c);
  f.seekp(-2, std::ios::end);
  f.put(static_cast<char>(c ^ 0x5a));
}

TEST(CheckpointRootTest, StepNames) {
  EXPECT_EQ(StepDirName(100), "step-000100");
  EXPECT_EQ(StepDirName(12345678), "step-12345678");
  EXPECT_EQ(ParseStepDirName("step-000100"), 100);
  EXPECT_EQ(ParseStepDirName("step-7"), 7);
  EXPECT_EQ(ParseStepDirName("step-"), std::nullopt);
  EXPECT_EQ(ParseStepDirName("step-1a"), std::nullopt);
  EXPECT_EQ(ParseStepDirName("latest"), std::nullopt);
}

class RootWorldTest : public ::testing::TestWithParam<int> {};

TEST_P(RootWorldTest, KeepsTheLastStepsAndLoadsTheNewest) {
  const int world = GetParam();
  const std::string root = testing::FreshDir(absl::StrCat("keep_", world));
  EXPECT_TRUE(absl::IsNotFound(LoadRoot(root, world).status())) << "an empty root has no checkpoint";
  for (int64_t step : {10, 20, 30, 40}) ASSERT_TRUE(SaveOk(root, step, world, /*keep_last=*/2).ok());
  EXPECT_EQ(ReadLatest(root), "step-000040");
  EXPECT_THAT(Names(PosixStorage(), root), ElementsAre("latest", "step-000030", "step-000040"));
  auto loaded = LoadRoot(root, world);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 40);
  EXPECT_TRUE(loaded->fallbacks.empty());
  EXPECT_EQ(loaded->dir, JoinPath(root, "step-000040"));
  // Another world size loads the same root.
  auto other = LoadRoot(root, world % 4 + 1);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->step, 40);
}

TEST_P(RootWorldTest, FallsBackWhenTheLatestFailsVerification) {
  const int world = GetParam();
  const std::string root = testing::FreshDir(absl::StrCat("fallback_", world));
  for (int64_t step : {1, 2, 3}) ASSERT_TRUE(SaveOk(root, step, world, /*keep_last=*/3).ok());
  FlipByteAtEnd(SomeDataFile(JoinPath(root, "step-000003")));
  auto loaded = LoadRoot(root, world);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 2);
  ASSERT_EQ(loaded->fallbacks.size(), 1u);
  EXPECT_THAT(loaded->fallbacks[0], HasSubstr("step 3"));
  EXPECT_THAT(loaded->fallbacks[0], HasSubstr("failed verification"));
  EXPECT_THAT(loaded->fallbacks[0], HasSubstr("falling back to step 2"));
  EXPECT_THAT(loaded->Message(), HasSubstr("loaded step 2 from"));

  // Step 2 without its index too: step 1 loads, both failures reported.
  ASSERT_TRUE(PosixStorage().Remove(JoinPath(root, "step-000002/" + std::string(kIndexFileName))).ok());
  loaded = LoadRoot(root, world);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 1);
  EXPECT_EQ(loaded->fallbacks.size(), 1u) << "an uncommitted older step is not a candidate";

  // Nothing loads: an error listing each failure; the destination untouched (LoadRoot checks).
  FlipByteAtEnd(SomeDataFile(JoinPath(root, "step-000001")));
  const auto none = LoadRoot(root, world);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("step 3"));
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("step 1"));
}

INSTANTIATE_TEST_SUITE_P(Worlds, RootWorldTest, ::testing::Values(1, 2, 3, 4));

// Issue 28: a step whose index.json is there but cannot be read, of each
// kind, is passed over like a damaged step: the load falls back to the
// previous good one, the fallback line names the entry and why, and no file
// changes.
class BrokenStepIndexTest : public ::testing::TestWithParam<std::tuple<testing::BrokenEntry, int>> {};

TEST_P(BrokenStepIndexTest, FallsBackToThePreviousGoodStep) {
  const auto [kind, world] = GetParam();
  const std::string root = testing::FreshDir(absl::StrCat("broken_step_", testing::BrokenEntryName(kind), "_", world));
  for (int64_t step : {1, 2}) ASSERT_TRUE(SaveOk(root, step, world, /*keep_last=*/2).ok());
  const std::string index = JoinPath(root, "step-000002/" + std::string(kIndexFileName));
  const std::string why = testing::BreakEntry(index, kind);
  const auto before = testing::DirectorySnapshot(root);
  const auto loaded =
      LoadRoot(root, world, kind == testing::BrokenEntry::kUnreadable ? testing::UnreadableThrough(index) : nullptr);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 1);
  ASSERT_EQ(loaded->fallbacks.size(), 1u);
  EXPECT_THAT(loaded->fallbacks[0], HasSubstr(index));
  EXPECT_THAT(loaded->fallbacks[0], HasSubstr(why));
  EXPECT_THAT(loaded->fallbacks[0], HasSubstr("falling back to step 1"));
  EXPECT_EQ(testing::DirectorySnapshot(root), before);
}

INSTANTIATE_TEST_SUITE_P(EveryKind, BrokenStepIndexTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kBrokenEntries), ::testing::Values(1, 3)),
                         [](const auto& info) {
                           return absl::StrCat(testing::BrokenEntryName(std::get<0>(info.param)), "_w",
                                               std::get<1>(info.param));
                         });

// What a save into a root removes, each told with how many files and why:
// the stale files of a step directory saved over, retention's old steps,
// leftovers of a save that never committed.
TEST(CheckpointRootTest, SavesSayWhatTheyRemove) {
  const std::string root = testing::FreshDir("removal_lines");
  std::vector<std::string> lines;
  const RemovalLog log = [&](const std::string& line) { lines.push_back(line); };
  auto save = [&](int64_t step, int keep_last) {
    SimulatedCluster cluster(2, testing::Options());
    return cluster.Run([&](RankContext& ctx) {
      return testing::SaveStepHere(ctx.pg, root, step, keep_last, nullptr, ctx.rank == 0 ? log : nullptr);
    });
  };
  ASSERT_TRUE(save(1, 2).ok());
  ASSERT_TRUE(save(2, 2).ok());
  EXPECT_TRUE(lines.empty()) << lines[0];
  ASSERT_TRUE(save(2, 2).ok());  // step 2 again: its first save's files go
  ASSERT_TRUE(PosixStorage().MakeDirectories(JoinPath(root, "step-000003")).ok());
  std::ofstream(JoinPath(root, "step-000003/.tmp-0123456789abcdef-r00000.safetensors")) << "partial";
  ASSERT_TRUE(save(4, 1).ok());
  EXPECT_THAT(lines, ElementsAre(absl::StrCat("removed 2 files in '", root,
                                              "/step-000002': the files of the checkpoint this save replaced"),
                                 absl::StrCat("removed 1 file in '", root,
                                              "/step-000003': step 3 has no index (a save that never committed, or an "
                                              "interrupted deletion); its directory is gone too"),
                                 absl::StrCat("removed 3 files in '", root,
                                              "/step-000002': retention keeps the newest 1 checkpoint; the step "
                                              "directory is gone too"),
                                 absl::StrCat("removed 3 files in '", root,
                                              "/step-000001': retention keeps the newest 1 checkpoint; the step "
                                              "directory is gone too")));
  EXPECT_THAT(Names(PosixStorage(), root), ElementsAre("latest", "step-000004"));
}

// The local resolution (what the ckpt tool uses on a root) tries the steps
// in the order the collective load does and reports the same fallback lines.
TEST(CheckpointRootTest, ResolveTriesTheStepsALoadTriesWithTheSameLines) {
  const std::string root = testing::FreshDir("resolve");
  for (int64_t step : {1, 2, 3}) ASSERT_TRUE(SaveOk(root, step, 2, /*keep_last=*/0).ok());
  FlipByteAtEnd(SomeDataFile(JoinPath(root, "step-000003")));
  const auto loaded = LoadRoot(root, 2);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::vector<std::string> tried;
  const auto resolved = ResolveCheckpointRoot(root, nullptr, [&](const std::string& dir) {
    tried.push_back(dir);
    return dir == loaded->dir ? absl::OkStatus() : absl::DataLossError("checksum mismatch (the check's own words)");
  });
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_THAT(tried, ElementsAre(JoinPath(root, "step-000003"), JoinPath(root, "step-000002")));
  EXPECT_EQ(resolved->step, 2);
  EXPECT_EQ(resolved->dir, loaded->dir);
  // The load's line with the check's words in place of LoadCheckpoint's.
  ASSERT_EQ(loaded->fallbacks.size(), 1u);
  ASSERT_EQ(resolved->fallbacks.size(), 1u);
  const std::string& line = loaded->fallbacks[0];
  const size_t words = line.find("failed verification: ") + std::string("failed verification: ").size();
  EXPECT_EQ(resolved->fallbacks[0], line.substr(0, words) + "checksum mismatch (the check's own words)" +
                                        line.substr(line.find("; falling back to step 2")));
  // Every step refused: FailedPrecondition naming each.
  const auto none = ResolveCheckpointRoot(root, nullptr, [](const std::string& dir) {
    return absl::DataLossError(absl::StrCat("bad ", dir));
  });
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  for (const char* step : {"step-000001", "step-000002", "step-000003"}) {
    EXPECT_THAT(std::string(none.status().message()), HasSubstr(step));
  }
  // No `latest`: NotFound, as a load.
  ASSERT_TRUE(PosixStorage().Remove(JoinPath(root, kLatestFileName)).ok());
  EXPECT_EQ(ResolveCheckpointRoot(root, nullptr, [](const std::string&) { return absl::OkStatus(); }).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(CheckpointRootTest, SaveAfterAFallbackMovesLatestBackAndKeepsNewerSteps) {
  const std::string root = testing::FreshDir("behind");
  for (int64_t step : {1, 2, 3}) ASSERT_TRUE(SaveOk(root, step, 2, /*keep_last=*/2).ok());
  ASSERT_TRUE(SaveOk(root, 1, 2, /*keep_last=*/1).ok()) << "a resumed run saves an older step";
  EXPECT_EQ(ReadLatest(root), "step-000001");
  EXPECT_THAT(Names(PosixStorage(), root), ElementsAre("latest", "step-000001", "step-000002", "step-000003"))
      << "retention never touches steps above the one saved";
  auto loaded = LoadRoot(root, 2);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 1);
}

TEST(CheckpointRootTest, RetentionRemovesLeftoversOfFailedSaves) {
  const std::string root = testing::FreshDir("leftovers");
  ASSERT_TRUE(SaveOk(root, 1, 2, 1).ok());
  // A failed save of step 2: only temporary files, no index.
  ASSERT_TRUE(PosixStorage().MakeDirectories(JoinPath(root, "step-000002")).ok());
  std::ofstream(JoinPath(root, "step-000002/.tmp-0123456789abcdef-r00000.safetensors")) << "partial";
  ASSERT_TRUE(SaveOk(root, 3, 2, 1).ok());
  EXPECT_THAT(Names(PosixStorage(), root), ElementsAre("latest", "step-000003"));
}

// Each bad root: the load and the save fail on every rank with an error
// naming the problem, and the root is unchanged.
struct BadRoot {
  std::string name;
  std::function<void(const std::string& root)> damage;
  std::string expected;
};

class BadRootTest : public ::testing::TestWithParam<BadRoot> {};

std::vector<std::string> Tree(const std::string& root) {
  std::vector<std::string> out;
  for (const std::string& name : Names(PosixStorage(), root)) {
    out.push_back(name);
    auto inside = PosixStorage().List(JoinPath(root, name));
    if (inside.ok()) {
      for (const std::string& f : *inside) out.push_back(name + "/" + f);
    }
  }
  return Sorted(out);
}

TEST_P(BadRootTest, NamesTheProblemAndDeletesNothing) {
  const BadRoot& bad = GetParam();
  const std::string root = testing::FreshDir("bad_" + bad.name);
  for (int64_t step : {1, 2, 3}) ASSERT_TRUE(SaveOk(root, step, 3, /*keep_last=*/0).ok());
  bad.damage(root);
  const std::vector<std::string> before = Tree(root);
  const auto loaded = LoadRoot(root, 3);
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr(bad.expected));
  for (const absl::Status& s : SaveStep(root, 4, 3, /*keep_last=*/1)) {
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(std::string(s.message()), HasSubstr(bad.expected));
    EXPECT_THAT(std::string(s.message()), HasSubstr("failed on rank 0"));
  }
  const auto resolved = ResolveCheckpointRoot(root, nullptr, [](const std::string&) { return absl::OkStatus(); });
  ASSERT_FALSE(resolved.ok());
  EXPECT_THAT(std::string(resolved.status().message()), HasSubstr(bad.expected));
  EXPECT_EQ(Tree(root), before);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadRootTest,
    ::testing::Values(
        BadRoot{"two_claim_one_step",
                [](const std::string& root) {
                  ASSERT_TRUE(PosixStorage().MakeDirectories(JoinPath(root, "step-2")).ok());
                },
                "'step-000002' and 'step-2' both claim step 2"},
        BadRoot{"step_is_a_file", [](const std::string& root) { std::ofstream(JoinPath(root, "step-000007")) << "x"; },
                "step-000007' claims step 7 but is not a checkpoint directory"},
        BadRoot{"step_dir_is_not_a_checkpoint",
                [](const std::string& root) {
                  ASSERT_TRUE(PosixStorage().MakeDirectories(JoinPath(root, "step-000000")).ok());
                  std::ofstream(JoinPath(root, "step-000000/notes.txt")) << "mine";
                },
                "holds 'notes.txt', which a checkpoint save does not write"}),
    [](const ::testing::TestParamInfo<BadRoot>& info) { return info.param.name; });

// Issue 49: a broken `latest` is like a broken step directory: the load
// says why in its first fallback line and loads the newest committed step;
// nothing is written; the next save replaces the pointer.
struct BrokenLatest {
  std::string name;
  std::function<void(const std::string& root)> damage;
  std::string expected;
};

class BrokenLatestTest : public ::testing::TestWithParam<BrokenLatest> {};

TEST_P(BrokenLatestTest, LoadFallsBackToTheNewestCommittedStep) {
  const BrokenLatest& bad = GetParam();
  const std::string root = testing::FreshDir("broken_" + bad.name);
  for (int64_t step : {1, 2, 3}) ASSERT_TRUE(SaveOk(root, step, 3, /*keep_last=*/0).ok());
  // Step 3 never committed: the newest good step is 2.
  ASSERT_TRUE(PosixStorage().Remove(JoinPath(root, "step-000003/" + std::string(kIndexFileName))).ok());
  bad.damage(root);
  const std::vector<std::string> before = Tree(root);
  const auto loaded = LoadRoot(root, 3);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 2);
  ASSERT_EQ(loaded->fallbacks.size(), 1u);
  EXPECT_THAT(loaded->fallbacks[0], HasSubstr("broken 'latest' pointer"));
  EXPECT_THAT(loaded->fallbacks[0], HasSubstr(bad.expected));
  EXPECT_THAT(loaded->fallbacks[0], HasSubstr("falling back to the newest committed step, 2"));
  const auto resolved = ResolveCheckpointRoot(root, nullptr, [](const std::string&) { return absl::OkStatus(); });
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->step, 2);
  EXPECT_EQ(resolved->fallbacks, loaded->fallbacks);
  EXPECT_EQ(Tree(root), before) << "a load wrote to the root";
  if (bad.name == "latest_is_a_directory") return;  // a save cannot rename over it
  ASSERT_TRUE(SaveOk(root, 4, 3, /*keep_last=*/0).ok());
  EXPECT_EQ(ReadLatest(root), "step-000004");
}

TEST(CheckpointRootTest, ABrokenLatestWithNoCommittedStepFailsNamingIt) {
  const std::string root = testing::FreshDir("broken_latest_alone");
  ASSERT_TRUE(SaveOk(root, 1, 2, /*keep_last=*/0).ok());
  ASSERT_TRUE(PosixStorage().Remove(JoinPath(root, "step-000001/" + std::string(kIndexFileName))).ok());
  std::ofstream(JoinPath(root, kLatestFileName)) << "step-three\n";
  const auto loaded = LoadRoot(root, 2);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("broken 'latest' pointer"));
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("no committed step to fall back to"));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BrokenLatestTest,
    ::testing::Values(
        BrokenLatest{"garbage_latest",
                     [](const std::string& root) { std::ofstream(JoinPath(root, kLatestFileName)) << "step-three\n"; },
                     "\"step-three\" is not a step directory name"},
        BrokenLatest{"dangling_latest",
                [](const std::string& root) {
                  testing::BreakEntry(JoinPath(root, kLatestFileName), testing::BrokenEntry::kDanglingLink);
                },
                "dangling symbolic link"},
        BrokenLatest{"latest_loop",
                [](const std::string& root) {
                  testing::BreakEntry(JoinPath(root, kLatestFileName), testing::BrokenEntry::kLinkLoop);
                },
                "symbolic-link loop"},
        BrokenLatest{"latest_is_a_directory",
                [](const std::string& root) {
                  testing::BreakEntry(JoinPath(root, kLatestFileName), testing::BrokenEntry::kDirectory);
                },
                "is a directory, not a regular file"},
        BrokenLatest{"latest_names_missing_step",
                [](const std::string& root) { std::ofstream(JoinPath(root, kLatestFileName)) << "step-000009\n"; },
                "it names 'step-000009', which is not in the root"}),
    [](const ::testing::TestParamInfo<BrokenLatest>& info) { return info.param.name; });

TEST(CheckpointRootTest, RetentionRefusesToDeleteForeignFiles) {
  const std::string root = testing::FreshDir("foreign");
  for (int64_t step : {1, 2}) ASSERT_TRUE(SaveOk(root, step, 2, 0).ok());
  std::ofstream(JoinPath(root, "step-000001/notes.txt")) << "mine";
  const std::vector<std::string> before = Tree(root);
  for (const absl::Status& s : SaveStep(root, 3, 2, /*keep_last=*/1)) {
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(std::string(s.message()), HasSubstr("step 3 is saved and 'latest' names it, but retention failed"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("notes.txt"));
  }
  EXPECT_EQ(ReadLatest(root), "step-000003");
  std::vector<std::string> after = Tree(root);
  for (const std::string& name : before) EXPECT_NE(std::find(after.begin(), after.end(), name), after.end()) << name;
}

TEST(CheckpointRootTest, RanksPassingDifferentStepsFail) {
  const std::string root = testing::FreshDir("steps_differ");
  SimulatedCluster cluster(2, testing::Options());
  std::vector<absl::Status> per_rank(2);
  ASSERT_TRUE(cluster
                  .Run([&](RankContext& ctx) -> absl::Status {
                    auto state = MakeState(testing::RootLayout(2), 1, ctx.pg);
                    if (!state.ok()) return state.status();
                    per_rank[ctx.rank] = SaveToCheckpointRoot(*state, root, 5 + ctx.rank, *ctx.pg);
                    return absl::OkStatus();
                  })
                  .ok());
  for (const absl::Status& s : per_rank) EXPECT_THAT(std::string(s.message()), HasSubstr("disagree on the step"));
  EXPECT_FALSE(PosixStorage().Exists(JoinPath(root, "step-000005")));
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint
