// The offline writer's checkpoints load with LoadCheckpoint at other world
// sizes and specs, bit-exact; bad additions are refused and write nothing;
// a second commit into the same directory replaces the first atomically.
#include "sharded/checkpoint/offline_writer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/posix_file.h"
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
  EXPECT_THAT(writer.AddChunked("h", at::zeros({4}, at::kHalf), 0).message(), HasSubstr("not supported"));
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

}  // namespace
}  // namespace shardlight::sharded::checkpoint
