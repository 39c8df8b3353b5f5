// ShardedTensor on the simulated cluster: random layouts through Gather,
// FullTensor, Reshard and Scatter at several world sizes.
#include "sharded/sharded_tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sharded/factories.h"
#include "sharded/test_layouts.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;
using testing::LocalShardsOf;
using testing::RandomLayout;
using testing::ReferenceTensor;

constexpr int kLayoutsPerWorldSize = 210;

simulate::ClusterOptions Options() {
  simulate::ClusterOptions o;
  o.collective_timeout = std::chrono::seconds(20);
  return o;
}

bool SameShards(const std::vector<Shard>& a, const std::vector<Shard>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(a[i].metadata == b[i].metadata) || !at::equal(a[i].tensor, b[i].tensor)) return false;
  }
  return true;
}

class ShardedTensorPropertyTest : public ::testing::TestWithParam<int> {};

// >= 200 seeded layouts per world size: Gather / FullTensor reproduce the
// reference exactly, and Reshard(A -> B -> A) is the identity.
TEST_P(ShardedTensorPropertyTest, GatherFullTensorAndReshardRoundTrip) {
  const int w = GetParam();
  SimulatedCluster cluster(w, Options());
  absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    std::mt19937_64 rng(1000 + w);  // identical draws on every rank
    for (int i = 0; i < kLayoutsPerWorldSize; ++i) {
      const testing::Layout a = RandomLayout(rng, w);
      std::string b_description;
      const ShardingSpec b = testing::RandomSpecFor(rng, a.sizes, w, &b_description);
      const std::string what = absl::StrCat("layout ", i, " (", a.description, " -> ", b_description, ")");
      at::Tensor reference = ReferenceTensor(a.sizes, a.dtype);
      TensorProperties props;
      props.dtype = a.dtype;
      auto meta = BuildMetadata(a.spec, a.sizes, props, w);
      if (!meta.ok()) return absl::InternalError(absl::StrCat(what, ": ", meta.status().message()));
      auto st = ShardedTensor::InitFromLocalShards(LocalShardsOf(reference, *meta, ctx.rank), a.sizes, ctx.pg);
      if (!st.ok()) return absl::InternalError(absl::StrCat(what, ": init: ", st.status().message()));

      auto full = st->FullTensor();
      if (!full.ok()) return full.status();
      if (!at::equal(*full, reference)) return absl::InternalError(absl::StrCat(what, ": FullTensor differs"));

      const int dst = i % w;
      auto gathered = st->Gather(dst);
      if (!gathered.ok()) return gathered.status();
      if (gathered->has_value() != (ctx.rank == dst)) return absl::InternalError(what + ": Gather on wrong rank");
      if (ctx.rank == dst && !at::equal(**gathered, reference)) {
        return absl::InternalError(absl::StrCat(what, ": Gather differs"));
      }

      auto there = st->Reshard(b);
      if (!there.ok()) return absl::InternalError(absl::StrCat(what, ": reshard: ", there.status().message()));
      auto mid = there->FullTensor();
      if (!mid.ok()) return mid.status();
      if (!at::equal(*mid, reference)) return absl::InternalError(what + ": resharded values differ");
      auto back = there->Reshard(a.spec);
      if (!back.ok()) return back.status();
      if (!SameShards(back->local_shards(), st->local_shards())) {
        return absl::InternalError(what + ": Reshard(A->B->A) is not the identity");
      }
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShardedTensorPropertyTest, ::testing::Values(1, 2, 3, 4, 5, 8),
                         [](const auto& info) { return absl::StrCat("W", info.param); });

// Chunk layouts only reshard between specs on the same sizes; the layouts
// above keep a's sizes, so also cover a real change of dim and grid here.
TEST(ShardedTensorTest, ReshardBetweenDimsAndGridsMovesOnlyChangedElements) {
  SimulatedCluster cluster(4, Options());
  auto stats = cluster.Run([](RankContext& ctx) -> absl::StatusOr<ExchangeStats> {
    const std::vector<int64_t> sizes = {8, 6};
    at::Tensor reference = ReferenceTensor(sizes, c10::ScalarType::Float);
    auto meta = BuildMetadata(ChunkShardingSpec::OnRanks(0, 4), sizes, {}, 4);
    auto st = ShardedTensor::InitFromLocalShards(LocalShardsOf(reference, *meta, ctx.rank), sizes, ctx.pg);
    if (!st.ok()) return st.status();
    EnumerableShardingSpec grid;
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 2; ++j) grid.shards.push_back({{i * 4, j * 3}, {4, 3}, Placement::Cpu(i * 2 + j)});
    }
    ExchangeStats stats;
    auto moved = st->Reshard(grid, &stats);
    if (!moved.ok()) return moved.status();
    auto full = moved->FullTensor();
    if (!full.ok() || !at::equal(*full, reference)) return absl::InternalError("grid values differ");
    return stats;
  });
  ASSERT_TRUE(stats.ok()) << stats.status();
  // Rank r owned rows [2r, 2r+2); in the grid rank 2i+j owns rows [4i, 4i+4) x
  // cols [3j, 3j+3). Each rank keeps a 2x3 block (rank 1: rows 2-3, cols 3-5),
  // so 24 of the 48 floats stay put and exactly the other 24 are sent.
  int64_t sent = 0, received = 0;
  for (const auto& s : *stats) {
    sent += s.bytes_sent;
    received += s.bytes_received;
    EXPECT_EQ(s.bytes_copied_locally, 6 * 4);
  }
  EXPECT_EQ(sent, 24 * 4);
  EXPECT_EQ(received, 24 * 4);
}

TEST(ShardedTensorTest, ScatterFromOneRankMatchesTheFullTensor) {
  for (int w : {1, 3, 5}) {
    SimulatedCluster cluster(w, Options());
    absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
      const std::vector<int64_t> sizes = {7, 3};
      at::Tensor reference = ReferenceTensor(sizes, c10::ScalarType::Double);
      const int src = w - 1;
      TensorProperties props;
      props.dtype = c10::ScalarType::Double;
      auto st = ShardedTensor::Scatter(ctx.rank == src ? reference : at::Tensor(), src,
                                       ChunkShardingSpec::OnRanks(0, ctx.world_size), sizes, props, ctx.pg);
      if (!st.ok()) return st.status();
      auto meta = BuildMetadata(ChunkShardingSpec::OnRanks(0, ctx.world_size), sizes, props, ctx.world_size);
      if (!SameShards(st->local_shards(), LocalShardsOf(reference, *meta, ctx.rank))) {
        return absl::InternalError("scattered shards differ");
      }
      return absl::OkStatus();
    });
    EXPECT_TRUE(status.ok()) << "W=" << w << ": " << status;
  }
}

// Copies (and moves, which copy) share the layout: the same metadata and
// shard list, not copies of them; values written through one are seen by
// all; ZerosLike gets a layout of its own with its requires_grad.
TEST(ShardedTensorTest, CopiesShareTheLayout) {
  SimulatedCluster cluster(3, Options());
  absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    auto st = Zeros(ChunkShardingSpec::OnRanks(0, ctx.world_size), {5, 2}, ShardedOptions{}, ctx.pg);
    if (!st.ok()) return st.status();
    ShardedTensor copy = *st;
    ShardedTensor moved_into = std::move(copy);
    for (const ShardedTensor* t : {&copy, &moved_into}) {
      if (&t->metadata() != &st->metadata() || &t->local_shards() != &st->local_shards()) {
        return absl::InternalError("a copy holds its own layout");
      }
    }
    st->local_shards()[0].tensor.fill_(ctx.rank + 1);
    if (!at::equal(copy.local_shards()[0].tensor, st->local_shards()[0].tensor)) {
      return absl::InternalError("a copy does not see values written through the original");
    }
    ShardedTensor zeros = st->ZerosLike(true);
    if (&zeros.metadata() == &st->metadata() || !zeros.metadata().properties.requires_grad ||
        st->metadata().properties.requires_grad || !zeros.local_shards()[0].tensor.requires_grad()) {
      return absl::InternalError("ZerosLike shares or changes the original's layout");
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

// rand(seed) gives the same global tensor on 1, 3 and 8 ranks and across specs.
TEST(ShardedTensorTest, RandomInitDependsOnlyOnSeedAndGlobalIndex) {
  const std::vector<int64_t> sizes = {9, 5, 3};
  std::vector<at::Tensor> results;
  for (int w : {1, 3, 8}) {
    for (int spec_kind = 0; spec_kind < 3; ++spec_kind) {
      SimulatedCluster cluster(w, Options());
      auto full = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<at::Tensor> {
        ShardingSpec spec = ChunkShardingSpec::OnRanks(spec_kind == 0 ? 0 : -1, ctx.world_size);
        if (spec_kind == 2) {
          std::mt19937_64 rng(7);
          EnumerableShardingSpec grid;
          for (int i = 0; i < 9; ++i) grid.shards.push_back({{i, 0, 0}, {1, 5, 3}, Placement::Cpu((i * 5) % ctx.world_size)});
          spec = grid;
        }
        auto st = Randn(spec, sizes, /*seed=*/42, {c10::ScalarType::Float, false}, ctx.pg);
        if (!st.ok()) return st.status();
        return st->FullTensor();
      });
      ASSERT_TRUE(full.ok()) << full.status();
      results.push_back((*full)[0]);
    }
  }
  for (size_t i = 1; i < results.size(); ++i) EXPECT_TRUE(at::equal(results[0], results[i])) << "variant " << i;
  // It is random: roughly standard normal, and another seed differs.
  EXPECT_NEAR(results[0].mean().item<double>(), 0.0, 0.3);
  EXPECT_NEAR(results[0].std().item<double>(), 1.0, 0.3);
  SimulatedCluster one(1, Options());
  auto other = one.Run([&](RankContext& ctx) -> absl::StatusOr<at::Tensor> {
    auto st = Rand(ChunkShardingSpec::OnRanks(0, 1), sizes, 43, {c10::ScalarType::Double, true}, ctx.pg);
    if (!st.ok()) return st.status();
    if (!st->local_shards()[0].tensor.requires_grad()) return absl::InternalError("requires_grad lost");
    return st->FullTensor();
  });
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_GE((*other)[0].min().item<double>(), 0.0);
  EXPECT_LT((*other)[0].max().item<double>(), 1.0);
  EXPECT_FALSE(at::equal((*other)[0].to(at::kFloat), results[0]));
}

TEST(ShardedTensorTest, FactoriesFillEveryDtype) {
  SimulatedCluster cluster(3, Options());
  absl::Status status = cluster.Run([](RankContext& ctx) -> absl::Status {
    for (c10::ScalarType dtype : {c10::ScalarType::Float, c10::ScalarType::Double, c10::ScalarType::BFloat16,
                                  c10::ScalarType::Long, c10::ScalarType::Bool}) {
      auto ones = Ones(ChunkShardingSpec::OnRanks(0, 3), {5, 2}, {dtype, false}, ctx.pg);
      if (!ones.ok()) return ones.status();
      auto full = ones->FullTensor();
      if (!full.ok()) return full.status();
      if (full->scalar_type() != dtype || !at::equal(*full, at::ones({5, 2}, dtype))) {
        return absl::InternalError(absl::StrCat("ones of ", c10::toString(dtype)));
      }
      auto sevens = Full(ChunkShardingSpec::OnRanks(1, 3), {2, 4}, dtype == c10::ScalarType::Bool ? 1 : 7,
                         {dtype, false}, ctx.pg);
      if (!sevens.ok()) return sevens.status();
      auto zeros = Zeros(ChunkShardingSpec::OnRanks(0, 3), {4}, {dtype, false}, ctx.pg);
      if (!zeros.ok() || zeros->FullTensor()->sum().item<double>() != 0) return absl::InternalError("zeros");
      auto empty = Empty(ChunkShardingSpec::OnRanks(0, 3), {4}, {dtype, false}, ctx.pg);
      if (!empty.ok()) return empty.status();
    }
    auto bad = Rand(ChunkShardingSpec::OnRanks(0, 3), {4}, 1, {c10::ScalarType::Long, false}, ctx.pg);
    if (bad.ok() || !absl::StrContains(bad.status().message(), "rand needs a floating dtype")) {
      return absl::InternalError(absl::StrCat("rand of int64: ", bad.status().ToString()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace shardlight::sharded
