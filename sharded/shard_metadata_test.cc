#include "sharded/shard_metadata.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

#include "sharded/sharding_spec.h"

namespace shardlight::sharded {
namespace {

using ::testing::HasSubstr;

ShardMetadata S(std::vector<int64_t> off, std::vector<int64_t> size, int rank) {
  return ShardMetadata(off, size, Placement::Cpu(rank));
}

ShardedTensorMetadata M(std::vector<int64_t> sizes, std::vector<ShardMetadata> shards) {
  ShardedTensorMetadata m;
  m.sizes = std::move(sizes);
  m.shards = std::move(shards);
  return m;
}

std::string Error(const ShardedTensorMetadata& m) { return std::string(m.Validate().message()); }

TEST(ShardMetadataTest, ValidLayoutsPass) {
  EXPECT_TRUE(M({10}, {S({0}, {4}, 0), S({4}, {6}, 1)}).Validate().ok());
  EXPECT_TRUE(M({4, 6}, {S({0, 0}, {2, 3}, 0), S({0, 3}, {2, 3}, 1), S({2, 0}, {2, 6}, 2)}).Validate().ok());
  // Zero-size shards are legal anywhere in bounds, even at the very end.
  EXPECT_TRUE(M({5}, {S({0}, {5}, 0), S({5}, {0}, 1), S({2}, {0}, 2)}).Validate().ok());
  // An empty tensor is covered by empty shards.
  EXPECT_TRUE(M({0, 3}, {S({0, 0}, {0, 3}, 0)}).Validate().ok());
}

TEST(ShardMetadataTest, WrongRankOfDimsNamesTheShard) {
  EXPECT_THAT(Error(M({4, 4}, {S({0, 0}, {4, 4}, 0), S({0}, {4}, 1)})),
              HasSubstr("shard 1 (offsets [0], sizes [4], rank:1/cpu) has 1-d offsets"));
}

TEST(ShardMetadataTest, OutOfBoundsNamesShardAndDim) {
  EXPECT_THAT(Error(M({4, 4}, {S({0, 0}, {4, 2}, 0), S({0, 2}, {4, 3}, 1)})),
              HasSubstr("shard 1 (offsets [0, 2], sizes [4, 3], rank:1/cpu) is out of bounds in dim 1"));
  EXPECT_THAT(Error(M({4}, {S({-1}, {5}, 0)})), HasSubstr("shard 0 (offsets [-1]"));
  EXPECT_THAT(Error(M({4}, {S({0}, {-4}, 0)})), HasSubstr("out of bounds"));
  // offset + size overflowing int64 must not wrap around into "in bounds".
  EXPECT_THAT(Error(M({4}, {S({2}, {INT64_MAX}, 0)})), HasSubstr("out of bounds"));
}

TEST(ShardMetadataTest, OverlapNamesBothShards) {
  EXPECT_THAT(Error(M({10}, {S({0}, {6}, 0), S({8}, {2}, 2), S({5}, {3}, 1)})),
              HasSubstr("shard 0 (offsets [0], sizes [6], rank:0/cpu) overlaps shard 2 (offsets [5], sizes [3]"));
  // 2-d blocks that overlap in a corner only.
  EXPECT_THAT(Error(M({4, 4}, {S({0, 0}, {3, 3}, 0), S({2, 2}, {2, 2}, 1), S({0, 3}, {2, 1}, 2)})),
              HasSubstr("overlaps"));
  // Duplicates of a full shard.
  EXPECT_THAT(Error(M({3}, {S({0}, {3}, 0), S({0}, {3}, 1)})), HasSubstr("shard 0"));
}

TEST(ShardMetadataTest, GapIsReported) {
  EXPECT_THAT(Error(M({10}, {S({0}, {4}, 0), S({5}, {5}, 1)})), HasSubstr("shards cover 9 of the 10 elements"));
  EXPECT_THAT(Error(M({2, 2}, {S({0, 0}, {1, 2}, 0)})), HasSubstr("gap"));
}

TEST(ShardMetadataTest, OtherTensorLevelErrors) {
  EXPECT_THAT(Error(M({4}, {})), HasSubstr("no shards"));
  ShardedTensorMetadata m = M({4}, {S({0}, {4}, 0)});
  m.properties.dtype = c10::ScalarType::QInt8;
  EXPECT_THAT(Error(m), HasSubstr("not supported"));
  EXPECT_THAT(Error(M({INT64_MAX, 4}, {S({0, 0}, {1, 1}, 0)})), HasSubstr("overflows int64"));
}

// 10k shards must validate fast on one sharded dim and on a grid.
TEST(ShardMetadataTest, TenThousandShardsValidateQuickly) {
  ShardedTensorMetadata line = M({10000, 3}, {});
  for (int i = 9999; i >= 0; --i) line.shards.push_back(S({i, 0}, {1, 3}, i % 8));
  ShardedTensorMetadata grid = M({100, 100}, {});
  for (int i = 0; i < 100; ++i) {
    for (int j = 0; j < 100; ++j) grid.shards.push_back(S({i, j}, {1, 1}, (i + j) % 8));
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(line.Validate().ok()) << line.Validate();
  EXPECT_TRUE(grid.Validate().ok()) << grid.Validate();
  line.shards[5000].sizes[0] = 2;  // now overlaps its neighbour
  line.shards[5001].sizes[0] = 0;  // keep the element count equal
  EXPECT_THAT(Error(line), HasSubstr("overlaps"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(ChunkShardingSpecTest, FollowsTorchChunk) {
  // torch.chunk(arange(5), 4) -> sizes 2, 2, 1 and nothing for the 4th.
  auto r = ChunkRanges(5, 4);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0], std::make_pair(int64_t{0}, int64_t{2}));
  EXPECT_EQ(r[1], std::make_pair(int64_t{2}, int64_t{2}));
  EXPECT_EQ(r[2], std::make_pair(int64_t{4}, int64_t{1}));
  EXPECT_EQ(r[3], std::make_pair(int64_t{5}, int64_t{0}));
  // The sizes PyTorch users trip on: 3 over 4, and 6 over 4 (2,2,2,0).
  auto three = ChunkRanges(3, 4);
  EXPECT_EQ(three[3].second, 0);
  EXPECT_EQ(three[2], std::make_pair(int64_t{2}, int64_t{1}));
  auto six = ChunkRanges(6, 4);
  EXPECT_EQ(six[2], std::make_pair(int64_t{4}, int64_t{2}));
  EXPECT_EQ(six[3], std::make_pair(int64_t{6}, int64_t{0}));
  auto zero = ChunkRanges(0, 3);
  for (auto& [o, s] : zero) EXPECT_EQ(s, 0);
  // Near INT64_MAX the ceil-division must not overflow.
  auto huge = ChunkRanges(INT64_MAX, 2);
  EXPECT_EQ(huge[0], std::make_pair(int64_t{0}, INT64_MAX / 2 + 1));
  EXPECT_EQ(huge[1], std::make_pair(INT64_MAX / 2 + 1, INT64_MAX / 2));
  EXPECT_THAT(std::string(BuildMetadata(ChunkShardingSpec::OnRanks(0, 2), {-3}, {}, 2).status().message()),
              HasSubstr("global sizes: negative size in [-3]"));
}

TEST(ChunkShardingSpecTest, BuildsValidatedMetadataWithNegativeDim) {
  auto m = BuildMetadata(ChunkShardingSpec::OnRanks(-1, 4), {2, 6}, {}, 4);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->shards.size(), 4u);
  EXPECT_EQ(m->shards[3].offsets, (::shardlight::sharded::Dims{0, 6}));
  EXPECT_EQ(m->shards[3].sizes, (::shardlight::sharded::Dims{2, 0}));
  EXPECT_EQ(m->shards[1].sizes, (::shardlight::sharded::Dims{2, 2}));
}

TEST(ChunkShardingSpecTest, BadSpecsAreNamed) {
  EXPECT_THAT(std::string(BuildMetadata(ChunkShardingSpec::OnRanks(2, 2), {4, 4}, {}, 2).status().message()),
              HasSubstr("chunk dim 2 is out of range for a 2-d tensor"));
  EXPECT_THAT(std::string(BuildMetadata(ChunkShardingSpec::OnRanks(-3, 2), {4, 4}, {}, 2).status().message()),
              HasSubstr("chunk dim -3"));
  EXPECT_THAT(std::string(BuildMetadata(ChunkShardingSpec{0, {}}, {4}, {}, 2).status().message()),
              HasSubstr("no placements"));
  EXPECT_THAT(std::string(BuildMetadata(ChunkShardingSpec::OnRanks(0, 3), {4}, {}, 2).status().message()),
              HasSubstr("shard 2 is placed on rank:2/cpu but the process group has 2 ranks"));
}

TEST(EnumerableShardingSpecTest, SeveralShardsPerRankAndValidation) {
  EnumerableShardingSpec spec{{S({0}, {2}, 1), S({2}, {2}, 0), S({4}, {2}, 1)}};
  auto m = BuildMetadata(spec, {6}, {}, 2);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->ShardsOnRank(1), (std::vector<int>{0, 2}));
  spec.shards[2].offsets[0] = 3;
  EXPECT_THAT(std::string(BuildMetadata(spec, {6}, {}, 2).status().message()), HasSubstr("overlaps"));
}

}  // namespace
}  // namespace shardlight::sharded
