// The offline writer's checkpoints load with LoadCheckpoint at other world
// sizes and specs, bit-exact; bad additions are refused and write nothing;
// a second commit into the same directory replaces the first atomically.
#include "sharded/checkpoint/offline/offline_writer.h"

#include <gmock/gmock.h>

#include <algorithm>
#include <gtest/gtest.h>

#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/storage/posix_file.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded::checkpoint {
namespace {

using testing::KeyedReference;
using testing::TensorSpec;
using ::testing::HasSubstr;

std::vector<TensorSpec> LoadLayout(int world) {
  return {
      {"embed", {10, 4}, c10::kFloat, ChunkShardingSpec::OnRanks(1, world)},
      {"table", {7, 3}, c10::kLong, std::nullopt},
      {"bias", {5}, c10::kBFloat16, ChunkShardingSpec::OnRanks(0, world)},
      {"flags", {4}, c10::kBool, std::nullopt},
      {"scalar", {}, c10::kDouble, std::nullopt},
  };
}

absl::Status WriteReference(const std::string& dir, int world, int salt) {
  OfflineWriterOptions options;
  options.checksum_block_bytes = 64;
  OfflineCheckpointWriter writer(dir, world, options);
  for (const TensorSpec& t : LoadLayout(1)) {
    at::Tensor full = KeyedReference(t.key, t.sizes, t.dtype, salt);
    absl::Status s = t.key == "embed" || t.key == "table" ? writer.AddChunked(t.key, full, 0) : writer.AddDense(t.key, full);
    if (!s.ok()) return s;
  }
  return writer.Commit();
}

absl::Status LoadAndCheck(const std::string& dir, int world, int salt) {
  simulate::SimulatedCluster cluster(world, testing::Options());
  return cluster.Run([&](simulate::RankContext& ctx) -> absl::Status {
    auto state = testing::MakeState(LoadLayout(world), /*salt=*/-1, ctx.pg);
    if (!state.ok()) return state.status();
    absl::Status s = LoadCheckpoint(*state, dir, *ctx.pg);
    if (!s.ok()) return s;
    return testing::CheckState(*state, salt);
  });
}

TEST(OfflineWriter, LoadsAtAnyWorldSize) {
  const std::string dir = testing::FreshDir("offline");
  ASSERT_TRUE(WriteReference(dir, 3, 1).ok());
  for (int world : {1, 2, 3, 4}) { absl::Status s = LoadAndCheck(dir, world, 1); EXPECT_TRUE(s.ok()) << world << s; }
  // A second commit replaces the first; the first's files are removed.
  ASSERT_TRUE(WriteReference(dir, 2, 2).ok());
  EXPECT_TRUE(LoadAndCheck(dir, 3, 2).ok());
  auto names = ListDirectory(dir);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(names->size(), 3u);  // index.json + 2 data files
}

TEST(OfflineWriter, RefusesBadAdditionsAndWritesNothing) {
  const std::string dir = testing::FreshDir("offline_bad");
  OfflineCheckpointWriter writer(dir + "/ckpt", 2);
  EXPECT_THAT(writer.AddDense("a/b", at::zeros({2})).message(), HasSubstr("a/b"));
  EXPECT_TRUE(writer.AddDense("w", at::zeros({2})).ok());
  EXPECT_THAT(writer.AddDense("w", at::zeros({2})).message(), HasSubstr("added twice"));
  const at::Tensor quantized = at::_empty_affine_quantized({4}, at::TensorOptions().dtype(at::kQInt8), 0.5, 0);
  EXPECT_THAT(writer.AddChunked("q", quantized, 0).message(), HasSubstr("not supported"));
  EXPECT_THAT(writer.AddChunked("v", at::zeros({4}), 1).message(), HasSubstr("cannot shard dim 1"));
  ShardedTensorMetadata m;
  m.sizes = {4};
  m.shards = {{{0}, {4}, Placement::Cpu(5)}};
  EXPECT_THAT(writer.AddSharded("x", m, {at::zeros({4})}).message(), HasSubstr("written for 2 ranks"));
  EXPECT_FALSE(PathExists(dir + "/ckpt"));
  OfflineWriterOptions tiny;
  tiny.checksum_block_bytes = 1;
  OfflineCheckpointWriter bad_options(dir + "/ckpt", 2, tiny);
  ASSERT_TRUE(bad_options.AddDense("w", at::zeros({2})).ok());
  EXPECT_THAT(bad_options.Commit().message(), HasSubstr("checksum_block_bytes"));
  EXPECT_FALSE(HasCommittedCheckpoint(dir + "/ckpt"));
}

// Tensors given as sources are read tile by tile during Commit, each tile at
// most the buffer, and the checkpoint is the one the tensors would give.
TEST(OfflineWriter, SourcesAreWrittenTileByTile) {
  const std::string dir = testing::FreshDir("offline_source");
  OfflineWriterOptions options;
  options.checksum_block_bytes = 64;
  options.buffer_bytes = 4096;  // the writer's floor: many tiles per tensor
  OfflineCheckpointWriter writer(dir, 3, options);
  int64_t calls = 0, largest_tile = 0;
  const std::vector<TensorSpec> layout = LoadLayout(1);
  for (size_t i = 0; i < layout.size(); ++i) {
    const at::Tensor full = KeyedReference(layout[i].key, layout[i].sizes, layout[i].dtype, 4);
    TensorSource source;
    source.dtype = full.scalar_type();
    source.sizes = full.sizes().vec();
    source.fill = [full, &calls, &largest_tile](const std::vector<int64_t>& off, const at::Tensor& tile) {
      at::Tensor src = full;
      for (size_t d = 0; d < off.size(); ++d) src = src.narrow(static_cast<int64_t>(d), off[d], tile.size(static_cast<int64_t>(d)));
      tile.copy_(src);
      ++calls;
      largest_tile = std::max<int64_t>(largest_tile, tile.numel() * tile.element_size());
      return absl::OkStatus();
    };
    const std::string& key = layout[i].key;
    absl::Status s = key == "embed" || key == "table" ? writer.AddChunked(key, source, 0) : writer.AddDense(key, source);
    ASSERT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(calls, 0);  // nothing is read before Commit
  ASSERT_TRUE(writer.Commit().ok());
  EXPECT_GE(calls, 5);
  EXPECT_LE(largest_tile, 4096);
  for (int world : {1, 2, 3}) {
    absl::Status s = LoadAndCheck(dir, world, 4);
    EXPECT_TRUE(s.ok()) << world << s;
  }
}

// A big source is split into many tiles no larger than the buffer; a fill
// that fails fails the commit, which leaves nothing behind.
TEST(OfflineWriter, SourceTilesAreBoundedAndErrorsCommitNothing) {
  const std::string dir = testing::FreshDir("offline_source_bad");
  OfflineWriterOptions options;
  options.buffer_bytes = 4096;
  int64_t calls = 0, largest_tile = 0;
  const at::Tensor full = at::arange(64 * 100, at::kFloat).reshape({64, 100});
  TensorSource source{c10::kFloat, {64, 100}, [&](const std::vector<int64_t>& off, const at::Tensor& tile) {
                        ++calls;
                        largest_tile = std::max<int64_t>(largest_tile, tile.numel() * 4);
                        tile.copy_(full.narrow(0, off[0], tile.size(0)).narrow(1, off[1], tile.size(1)));
                        return absl::OkStatus();
                      }};
  {
    OfflineCheckpointWriter writer(dir + "/good", 2, options);
    ASSERT_TRUE(writer.AddChunked("w", source, 1).ok());
    ASSERT_TRUE(writer.Commit().ok());
  }
  EXPECT_LE(largest_tile, 4096);
  EXPECT_GE(calls, 64 * 100 * 4 / 4096);
  simulate::SimulatedCluster cluster(1, testing::Options());
  absl::Status loaded = cluster.Run([&](simulate::RankContext& ctx) -> absl::Status {
    StateDict state;
    SL_RETURN_IF_ERROR(state.Insert("w", at::zeros({64, 100})));
    SL_RETURN_IF_ERROR(LoadCheckpoint(state, dir + "/good", *ctx.pg));
    return testing::BitEqual(std::get<at::Tensor>(*state.Find("w")), full) ? absl::OkStatus()
                                                                           : absl::InternalError("values differ");
  });
  EXPECT_TRUE(loaded.ok()) << loaded;

  OfflineCheckpointWriter writer(dir + "/bad", 2, options);
  TensorSource failing{c10::kFloat, {64, 100}, [&](const std::vector<int64_t>& off, const at::Tensor&) {
                         return off[0] >= 32 ? absl::DataLossError("source row 32 is corrupt") : absl::OkStatus();
                       }};
  ASSERT_TRUE(writer.AddChunked("w", failing, 0).ok());
  const absl::Status s = writer.Commit();
  EXPECT_THAT(s.message(), HasSubstr("source row 32 is corrupt"));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(HasCommittedCheckpoint(dir + "/bad"));
  auto names = ListDirectory(dir + "/bad");
  EXPECT_TRUE(!names.ok() || names->empty()) << "files left behind";
  OfflineCheckpointWriter no_fill(dir + "/none", 1);
  EXPECT_THAT(no_fill.AddDense("w", TensorSource{c10::kFloat, {2}, nullptr}).message(), HasSubstr("no fill"));
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint
