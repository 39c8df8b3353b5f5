// Save at W = 4, load at W = 1, 2, 3, 4, 8 under other specs: bit-exact for
// every dtype, with uneven, empty and several-per-rank shards, dense tensors,
// and dense <-> sharded across the save and the load.
#include "sharded/checkpoint/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/storage/posix_file.h"
#include "sharded/test_layouts.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded::checkpoint {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;
using testing::CheckState;
using testing::MakeState;
using testing::TensorSpec;
using ::testing::HasSubstr;

// Small blocks and buffers so the test's small tensors span many blocks and
// tiles, as a large checkpoint would.
SaveOptions SmallSave() {
  SaveOptions o;
  o.checksum_block_bytes = 256;
  o.buffer_bytes = 1024;
  return o;
}

LoadOptions SmallLoad() {
  LoadOptions o;
  o.buffer_bytes = 2048;
  return o;
}

// An explicit grid over rows x cols, blocks placed round-robin on `ranks`.
EnumerableShardingSpec Grid(const std::vector<int64_t>& row_cuts, const std::vector<int64_t>& col_cuts,
                            const std::vector<int>& ranks) {
  EnumerableShardingSpec spec;
  size_t k = 0;
  for (size_t i = 0; i + 1 < row_cuts.size(); ++i) {
    for (size_t j = 0; j + 1 < col_cuts.size(); ++j) {
      spec.shards.push_back({{row_cuts[i], col_cuts[j]},
                             {row_cuts[i + 1] - row_cuts[i], col_cuts[j + 1] - col_cuts[j]},
                             Placement::Cpu(ranks[k++ % ranks.size()])});
    }
  }
  return spec;
}

ChunkShardingSpec Chunks(int64_t dim, const std::vector<int>& ranks) {
  ChunkShardingSpec spec;
  spec.dim = dim;
  for (int r : ranks) spec.placements.push_back(Placement::Cpu(r));
  return spec;
}

// The dict saved at W = 4.
std::vector<TensorSpec> SavedLayout() {
  return {
      {"f32.uneven", {10, 6}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(0, 4)},          // 3,3,3,1 rows
      {"f64.trailing_empty", {3, 5}, c10::ScalarType::Double, ChunkShardingSpec::OnRanks(0, 4)},  // 1,1,1,0
      {"bf16.cols", {7, 9}, c10::ScalarType::BFloat16, Chunks(1, {3, 2, 1, 0})},                 // 3,3,3,0 cols
      // Two shards on each of ranks 0-2, none on rank 3, one empty row band.
      {"i64.grid", {8, 6}, c10::ScalarType::Long, Grid({0, 3, 3, 8}, {0, 2, 6}, {0, 1, 2})},
      {"bool.two_per_rank", {13}, c10::ScalarType::Bool, Chunks(0, {0, 1, 2, 3, 0, 1, 2, 3})},  // 2 x 6, 1, 0
      {"f32.big", {300, 64}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(0, 4)},
      {"f32.3d", {5, 4, 6}, c10::ScalarType::Float, Chunks(-1, {1, 0, 3, 2})},
      {"dense.f32", {4, 4}, c10::ScalarType::Float, std::nullopt},
      {"dense.i64.scalar", {}, c10::ScalarType::Long, std::nullopt},
      {"dense.bool", {5}, c10::ScalarType::Bool, std::nullopt},
      {"dense.f64.empty", {0, 3}, c10::ScalarType::Double, std::nullopt},
      {"dense.bf16", {3, 2}, c10::ScalarType::BFloat16, std::nullopt},
  };
}

// The same keys laid out for a load at `world`: variant 0 chunks dim 0,
// variant 1 chunks the last dim, variant 2 draws random specs (grids with
// several shards per rank, empty shards) and swaps dense and sharded.
std::vector<TensorSpec> LoadLayout(int world, int variant) {
  std::vector<TensorSpec> out = SavedLayout();
  std::mt19937_64 rng(100 * world + variant);
  bool swap = false;
  for (TensorSpec& t : out) {
    const bool can_shard = !t.sizes.empty() && IsSupportedDtype(t.dtype);
    if (variant == 0 && t.spec) t.spec = ChunkShardingSpec::OnRanks(0, world);
    if (variant == 1 && t.spec) t.spec = ChunkShardingSpec::OnRanks(-1, world);
    if (variant == 2 && can_shard) {
      swap = !swap;
      std::string description;
      if (t.spec && swap) {
        t.spec = std::nullopt;  // sharded at save, dense at load
      } else {
        t.spec = sharded::testing::RandomSpecFor(rng, t.sizes, world, &description);
      }
    }
  }
  return out;
}

// Saved once at W = 4, shared by the load tests.
const std::string& SavedCheckpoint() {
  static const std::string* dir = [] {
    auto* d = new std::string(testing::FreshDir("saved_w4"));
    SimulatedCluster cluster(4, testing::Options());
    absl::Status s = cluster.Run([&](RankContext& ctx) -> absl::Status {
      auto state = MakeState(SavedLayout(), /*salt=*/1, ctx.pg);
      if (!state.ok()) return state.status();
      return SaveCheckpoint(*state, *d, *ctx.pg, SmallSave());
    });
    EXPECT_TRUE(s.ok()) << s;
    return d;
  }();
  return *dir;
}

class LoadAtWorldSize : public ::testing::TestWithParam<int> {};

TEST_P(LoadAtWorldSize, EverySpecIsBitExact) {
  const int world = GetParam();
  const std::string& dir = SavedCheckpoint();
  SimulatedCluster cluster(world, testing::Options());
  for (int variant = 0; variant < 3; ++variant) {
    absl::Status s = cluster.Run([&](RankContext& ctx) -> absl::Status {
      auto state = MakeState(LoadLayout(world, variant), /*salt=*/-1, ctx.pg);
      if (!state.ok()) return state.status();
      // Variant 0 also runs with the default (large) buffer.
      absl::Status loaded = LoadCheckpoint(*state, dir, *ctx.pg, variant == 0 ? LoadOptions() : SmallLoad());
      if (!loaded.ok()) return loaded;
      return CheckState(*state, /*salt=*/1);
    });
    EXPECT_TRUE(s.ok()) << "W=" << world << " variant " << variant << ": " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, LoadAtWorldSize, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return absl::StrCat("W", info.param); });

// Random layouts (the sharded package's generator: 1-4 dims, every dtype,
// empty dims and shards, grids) through save at 4 and load at 3 and 5.
TEST(CheckpointTest, RandomLayoutsReloadUnderRandomSpecs) {
  std::mt19937_64 rng(2024);
  std::vector<TensorSpec> saved;
  for (int i = 0; i < 24; ++i) {
    sharded::testing::Layout layout = sharded::testing::RandomLayout(rng, 4);
    saved.push_back({absl::StrCat("layer", i, ".w"), layout.sizes, layout.dtype, layout.spec});
  }
  const std::string dir = testing::FreshDir("random_layouts");
  SimulatedCluster save_cluster(4, testing::Options());
  absl::Status s = save_cluster.Run([&](RankContext& ctx) -> absl::Status {
    auto state = MakeState(saved, 3, ctx.pg);
    if (!state.ok()) return state.status();
    return SaveCheckpoint(*state, dir, *ctx.pg, SmallSave());
  });
  ASSERT_TRUE(s.ok()) << s;
  for (int world : {3, 5}) {
    std::vector<TensorSpec> target = saved;
    for (TensorSpec& t : target) {
      std::string description;
      t.spec = sharded::testing::RandomSpecFor(rng, t.sizes, world, &description);
    }
    SimulatedCluster cluster(world, testing::Options());
    s = cluster.Run([&](RankContext& ctx) -> absl::Status {
      auto state = MakeState(target, -1, ctx.pg);
      if (!state.ok()) return state.status();
      absl::Status loaded = LoadCheckpoint(*state, dir, *ctx.pg, SmallLoad());
      if (!loaded.ok()) return loaded;
      return CheckState(*state, 3);
    });
    EXPECT_TRUE(s.ok()) << "W=" << world << ": " << s;
  }
}

// A 4 -> 3 reshard of row chunks: each rank reads its new rows plus at most
// the partial checksum blocks at the ends of its (at most two) runs.
TEST(CheckpointTest, ReshardedLoadReadsOnlyOverlappingBytes) {
  const std::vector<TensorSpec> saved = {{"w", {3000, 16}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(0, 4)}};
  const std::string dir = testing::FreshDir("reads");
  SaveOptions save;
  save.checksum_block_bytes = 4096;
  SimulatedCluster four(4, testing::Options());
  ASSERT_TRUE(four.Run([&](RankContext& ctx) -> absl::Status {
                    auto state = MakeState(saved, 0, ctx.pg);
                    if (!state.ok()) return state.status();
                    SaveStats st;
                    absl::Status saved_ok = SaveCheckpoint(*state, dir, *ctx.pg, save, &st);
                    if (!saved_ok.ok()) return saved_ok;
                    // The save's time, split: the data file's and the rest.
                    if (!(st.data_seconds > 0 && st.metadata_seconds > 0)) {
                      return absl::InternalError(absl::StrCat("save times ", st.data_seconds, " / ", st.metadata_seconds));
                    }
                    return absl::OkStatus();
                  }).ok());
  std::vector<TensorSpec> target = saved;
  target[0].spec = ChunkShardingSpec::OnRanks(0, 3);
  SimulatedCluster three(3, testing::Options());
  auto stats = three.Run([&](RankContext& ctx) -> absl::StatusOr<LoadStats> {
    auto state = MakeState(target, -1, ctx.pg);
    if (!state.ok()) return state.status();
    LoadStats st;
    absl::Status s = LoadCheckpoint(*state, dir, *ctx.pg, LoadOptions(), &st);
    if (!s.ok()) return s;
    s = CheckState(*state, 0);
    if (!s.ok()) return s;
    return st;
  });
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (int r = 0; r < 3; ++r) {
    const LoadStats& st = (*stats)[r];
    EXPECT_EQ(st.bytes_loaded, 1000 * 16 * 4) << "rank " << r;
    EXPECT_GE(st.data_bytes_read, st.bytes_loaded) << "rank " << r;
    EXPECT_LE(st.data_bytes_read, st.bytes_loaded + 4 * 4096) << "rank " << r;
    EXPECT_LE(st.files_opened, 2) << "rank " << r;
    EXPECT_GT(st.header_bytes_read, 0);
    EXPECT_GT(st.index_bytes_read, 0);
    EXPECT_GT(st.data_seconds, 0) << "rank " << r;
    EXPECT_GT(st.metadata_seconds, 0) << "rank " << r;
  }
}

// Dense tensors live in rank 0's file only; no byte is stored twice.
TEST(CheckpointTest, DenseTensorsAreWrittenOnceByRankZero) {
  const std::string& dir = SavedCheckpoint();
  auto text = ReadWholeFile(JoinPath(dir, kIndexFileName), kMaxIndexBytes);
  ASSERT_TRUE(text.ok());
  auto index = ParseIndex(*text, "index");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->world_size, 4);
  ASSERT_EQ(index->files.size(), 4u);
  int64_t tensor_bytes = 0, file_data_bytes = 0;
  for (const IndexTensor& t : index->tensors) {
    int64_t n = c10::elementSize(t.dtype);
    for (int64_t s : t.shape) n *= s;
    tensor_bytes += n;
    if (!t.sharded) {
      EXPECT_EQ(t.shards.size(), 1u);
      EXPECT_EQ(ShardFileName(*index, t.shards[0]), index->files[0].name) << t.key;
    }
  }
  for (const IndexFile& f : index->files) file_data_bytes += f.bytes - 8 - f.header_bytes;
  EXPECT_EQ(file_data_bytes, tensor_bytes);
  // The ranks' shard counts follow the saved specs, empty shards included.
  EXPECT_EQ(index->Find("bool.two_per_rank")->shards.size(), 8u);
  EXPECT_EQ(index->Find("i64.grid")->shards.size(), 6u);
}

TEST(CheckpointTest, NewSaveReplacesTheOldAndRemovesItsFiles) {
  const std::string dir = testing::FreshDir("overwrite");
  const std::vector<TensorSpec> layout = {{"a", {9, 2}, c10::ScalarType::Double, ChunkShardingSpec::OnRanks(0, 2)},
                                          {"b", {3}, c10::ScalarType::Long, std::nullopt}};
  // Other tools' files in the directory are left alone.
  std::ofstream(JoinPath(dir, "notes.txt")) << "mine";
  std::ofstream(JoinPath(dir, "data-model.safetensors")) << "not a checkpoint's";
  SimulatedCluster cluster(2, testing::Options());
  for (int salt : {4, 5}) {
    absl::Status s = cluster.Run([&](RankContext& ctx) -> absl::Status {
      auto state = MakeState(layout, salt, ctx.pg);
      if (!state.ok()) return state.status();
      return SaveCheckpoint(*state, dir, *ctx.pg);
    });
    ASSERT_TRUE(s.ok()) << s;
  }
  auto names = ListDirectory(dir);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(names->size(), 5u) << "index.json, two data files and the two foreign files expected";
  EXPECT_TRUE(PathExists(JoinPath(dir, "notes.txt")));
  EXPECT_TRUE(PathExists(JoinPath(dir, "data-model.safetensors")));
  absl::Status s = cluster.Run([&](RankContext& ctx) -> absl::Status {
    auto state = MakeState(layout, -1, ctx.pg);
    if (!state.ok()) return state.status();
    absl::Status loaded = LoadCheckpoint(*state, dir, *ctx.pg);
    if (!loaded.ok()) return loaded;
    return CheckState(*state, 5);
  });
  EXPECT_TRUE(s.ok()) << s;
}

// Issue 28: every removal is told to SaveOptions::on_removed on rank 0, with
// how many files and why: a first save into a directory without an index
// removes a never-committed save's leftovers; a save over a checkpoint
// removes its files apart from other leftovers; a save over an index that
// cannot be read says so; RemoveUnreferencedFiles says what it removed.
// Files a save never writes stay.
TEST(CheckpointTest, EveryRemovalIsToldWithItsReason) {
  const std::string dir = testing::FreshDir("removal_reasons");
  const std::vector<TensorSpec> layout = {{"a", {9, 2}, c10::ScalarType::Double, ChunkShardingSpec::OnRanks(0, 2)}};
  std::vector<std::string> lines;
  SimulatedCluster cluster(2, testing::Options());
  auto save = [&] {
    return cluster.Run([&](RankContext& ctx) -> absl::Status {
      auto state = MakeState(layout, 1, ctx.pg);
      if (!state.ok()) return state.status();
      SaveOptions options;
      if (ctx.rank == 0) options.on_removed = [&](const std::string& line) { lines.push_back(line); };
      return SaveCheckpoint(*state, dir, *ctx.pg, options);
    });
  };
  auto leave = [&](const std::string& name) { std::ofstream(JoinPath(dir, name)) << "left"; };
  const std::string in_dir = absl::StrCat("in '", dir, "': ");
  leave("data-00000000000000aa-r00000.safetensors");
  leave(".tmp-00000000000000aa-r00001.safetensors");
  leave("notes.txt");
  ASSERT_TRUE(save().ok());
  leave(".tmp-00000000000000bb-index.json");
  ASSERT_TRUE(save().ok());
  ASSERT_TRUE(PosixStorage().Remove(JoinPath(dir, kIndexFileName)).ok());
  testing::BreakEntry(JoinPath(dir, kIndexFileName), testing::BrokenEntry::kDanglingLink);
  ASSERT_TRUE(save().ok());
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], absl::StrCat("removed 2 files ", in_dir,
                                   "the directory had no index (leftovers of a save that never committed)"));
  EXPECT_EQ(lines[1], absl::StrCat("removed 2 files ", in_dir, "the files of the checkpoint this save replaced"));
  EXPECT_EQ(lines[2], absl::StrCat("removed 1 file ", in_dir, "no index named them (leftovers of saves that never committed)"));
  EXPECT_THAT(lines[3], HasSubstr(absl::StrCat("removed 2 files ", in_dir, "no readable index named them (the index "
                                               "this save replaced could not be read: ")));
  EXPECT_THAT(lines[3], HasSubstr("dangling symbolic link"));
  EXPECT_EQ(testing::FileContents(JoinPath(dir, "notes.txt")), "left");

  lines.clear();
  leave("data-00000000000000cc-r00001.safetensors");
  const absl::StatusOr<int> removed =
      RemoveUnreferencedFiles(dir, nullptr, [&](const std::string& line) { lines.push_back(line); });
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 1);
  EXPECT_EQ(lines, std::vector<std::string>{absl::StrCat(
                       "removed 1 file ", in_dir,
                       "the committed checkpoint does not reference them (left by a save that failed, or was killed "
                       "after its commit)")});
  EXPECT_EQ(testing::FileContents(JoinPath(dir, "notes.txt")), "left");
}

// Non-contiguous sources are staged through the buffer; parameters that
// require grad load in place; strict mode names extra and missing keys.
TEST(CheckpointTest, ViewsParametersAndKeySets) {
  const std::string dir = testing::FreshDir("views");
  SimulatedCluster cluster(2, testing::Options());
  const at::Tensor matrix = testing::KeyedReference("m", {6, 5}, c10::ScalarType::Float, 0);
  absl::Status s = cluster.Run([&](RankContext& ctx) -> absl::Status {
    StateDict state;
    absl::Status st = state.Insert("m.t", matrix.t());  // a transposed view
    if (st.ok()) st = state.Insert("extra", at::ones({2}));
    if (!st.ok()) return st;
    SaveOptions options;
    options.buffer_bytes = 16;  // staged 4 floats at a time
    return SaveCheckpoint(state, dir, *ctx.pg, options);
  });
  ASSERT_TRUE(s.ok()) << s;
  auto results = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::vector<std::string>> {
    std::vector<std::string> out;
    StateDict target;
    at::Tensor param = at::zeros({5, 6}).set_requires_grad(true);
    if (absl::Status st = target.Insert("m.t", param); !st.ok()) return st;
    out.push_back(std::string(LoadCheckpoint(target, dir, *ctx.pg).message()));
    LoadOptions lenient;
    lenient.strict = false;
    absl::Status st = LoadCheckpoint(target, dir, *ctx.pg, lenient);
    if (!st.ok()) return st;
    if (!at::equal(param.detach(), matrix.t()) || !param.requires_grad()) return absl::InternalError("m.t wrong");
    target.Set("missing", at::full({1}, 5.0));
    LoadStats stats;
    st = LoadCheckpoint(target, dir, *ctx.pg, lenient, &stats);
    if (!st.ok()) return st;
    out.push_back(absl::StrCat("missing: ", stats.missing_keys.size() == 1 ? stats.missing_keys[0] : "?",
                               ", unexpected: ", stats.unexpected_keys.size() == 1 ? stats.unexpected_keys[0] : "?",
                               ", kept: ", std::get<at::Tensor>(*target.Find("missing")).item<float>()));
    return out;
  });
  ASSERT_TRUE(results.ok()) << results.status();
  for (const auto& rank : *results) {
    EXPECT_THAT(rank[0], HasSubstr("missing keys (in the state dict to fill, not loaded): none; unexpected keys "
                                   "(selected in the checkpoint, not in the state dict): 'extra'"));
    EXPECT_EQ(rank[1], "missing: missing, unexpected: extra, kept: 5");
  }
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint
