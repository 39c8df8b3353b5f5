// InitFromLocalShards on inconsistent input: every rank returns the same
// error, naming what is wrong, within seconds -- and a rank that dies leaves
// its peers with an error, not a hang.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>

#include "absl/strings/str_cat.h"
#include "sharded/factories.h"
#include "sharded/sharded_tensor.h"
#include "sharded/test_layouts.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded {
namespace {

using ::testing::HasSubstr;
using simulate::RankContext;
using simulate::SimulatedCluster;

// Each rank builds its chunk shard of a 12x4 float tensor (dim 0), lets
// `tamper` damage its input, and returns the error message it got ("" for OK).
using Tamper = std::function<void(int rank, std::vector<Shard>& shards, std::vector<int64_t>& sizes)>;

std::vector<std::string> RunInit(int w, const Tamper& tamper) {
  simulate::ClusterOptions options;
  options.collective_timeout = std::chrono::seconds(30);
  SimulatedCluster cluster(w, options);
  const auto start = std::chrono::steady_clock::now();
  auto messages = cluster.Run([&](RankContext& ctx) -> std::string {
    std::vector<int64_t> sizes = {12, 4};
    at::Tensor reference = testing::ReferenceTensor(sizes, c10::ScalarType::Float);
    auto meta = BuildMetadata(ChunkShardingSpec::OnRanks(0, ctx.world_size), sizes, {}, ctx.world_size);
    std::vector<Shard> shards = testing::LocalShardsOf(reference, *meta, ctx.rank);
    tamper(ctx.rank, shards, sizes);
    auto st = ShardedTensor::InitFromLocalShards(std::move(shards), sizes, ctx.pg);
    return st.ok() ? std::string() : std::string(st.status().message());
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_TRUE(messages.ok()) << messages.status();
  return messages.ok() ? *messages : std::vector<std::string>(w, "run failed");
}

void ExpectSameErrorEverywhere(const std::vector<std::string>& messages, const std::string& needle) {
  ASSERT_FALSE(messages.empty());
  for (size_t r = 0; r < messages.size(); ++r) {
    EXPECT_THAT(messages[r], HasSubstr(needle)) << "rank " << r;
    EXPECT_EQ(messages[r], messages[0]) << "rank " << r << " got a different error";
  }
}

class InitValidationTest : public ::testing::TestWithParam<int> {};

TEST_P(InitValidationTest, ConsistentInputSucceeds) {
  for (const std::string& m : RunInit(GetParam(), [](int, auto&, auto&) {})) EXPECT_EQ(m, "");
}

TEST_P(InitValidationTest, TensorSizeDiffersFromItsMetadata) {
  ExpectSameErrorEverywhere(RunInit(GetParam(), [](int rank, auto& shards, auto&) {
                              if (rank == 1) shards[0].tensor = at::zeros({1, 4});
                            }),
                            "rank 1: local shard 0: tensor sizes [1, 4] differ from its metadata sizes");
}

TEST_P(InitValidationTest, DtypeDiffersBetweenRanks) {
  ExpectSameErrorEverywhere(RunInit(GetParam(), [](int rank, auto& shards, auto&) {
                              if (rank == 1) shards[0].tensor = shards[0].tensor.to(at::kDouble);
                            }),
                            "dtype differs between ranks: rank 0 has Float, rank 1 has Double");
}

TEST_P(InitValidationTest, RequiresGradDiffersBetweenRanks) {
  ExpectSameErrorEverywhere(RunInit(GetParam(), [](int rank, auto& shards, auto&) {
                              if (rank == 1) shards[0].tensor.set_requires_grad(true);
                            }),
                            "requires_grad differs between ranks: rank 0 has 0, rank 1 has 1");
}

TEST_P(InitValidationTest, OverlapBetweenRanks) {
  ExpectSameErrorEverywhere(RunInit(GetParam(), [](int rank, auto& shards, auto&) {
                              if (rank == 1) {  // claim rank 0's first row too
                                auto& m = shards[0].metadata;
                                m.offsets[0] -= 1;
                                m.sizes[0] += 1;
                                shards[0].tensor = at::zeros(m.sizes);
                              }
                            }),
                            "overlaps");
}

TEST_P(InitValidationTest, GapBetweenRanks) {
  ExpectSameErrorEverywhere(RunInit(GetParam(), [](int rank, auto& shards, auto&) {
                              if (rank == 0) shards.clear();
                            }),
                            "shards cover");
}

TEST_P(InitValidationTest, ShardPlacedOnAnotherRank) {
  ExpectSameErrorEverywhere(RunInit(GetParam(), [](int rank, auto& shards, auto&) {
                              if (rank == 1) shards[0].metadata.placement = Placement::Cpu(0);
                            }),
                            "rank 1: local shard 0 is placed on rank:0/cpu but was given to rank 1");
}

TEST_P(InitValidationTest, GlobalSizesDifferBetweenRanks) {
  const auto messages = RunInit(GetParam(), [](int rank, auto&, auto& sizes) {
    if (rank == 1) sizes = {12, 5};
  });
  ExpectSameErrorEverywhere(messages, "ranks disagree on the global sizes: rank ");
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, InitValidationTest, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return absl::StrCat("W", info.param); });

TEST(InitValidationTest, LocalMetadataPathChecksWithoutCommunication) {
  SimulatedCluster cluster(2);
  auto messages = cluster.Run([](RankContext& ctx) -> std::string {
    auto meta = BuildMetadata(ChunkShardingSpec::OnRanks(0, 2), {4}, {}, 2);
    std::vector<Shard> shards = testing::LocalShardsOf(at::ones({4}), *meta, ctx.rank);
    if (ctx.rank == 1) shards[0].metadata.offsets[0] = 1;
    auto st = ShardedTensor::InitFromLocalShardsAndGlobalMetadata(std::move(shards), *meta, ctx.pg);
    return st.ok() ? "" : std::string(st.status().message());
  });
  ASSERT_TRUE(messages.ok()) << messages.status();
  EXPECT_EQ((*messages)[0], "");
  EXPECT_THAT((*messages)[1], HasSubstr("local shard 0 (offsets [1], sizes [2], rank:1/cpu) differs from the "
                                        "global metadata's shard 1 (offsets [2]"));
}

// Ranks passing different layouts to a factory all fail the same way.
TEST(InitValidationTest, FactoryLayoutDisagreementFailsEveryRank) {
  SimulatedCluster cluster(3);
  auto messages = cluster.Run([](RankContext& ctx) -> std::string {
    auto st = Zeros(ChunkShardingSpec::OnRanks(ctx.rank == 2 ? 1 : 0, 3), {6, 6}, {}, ctx.pg);
    return st.ok() ? "" : std::string(st.status().message());
  });
  ASSERT_TRUE(messages.ok()) << messages.status();
  ExpectSameErrorEverywhere(*messages, "ranks disagree on the sharded tensor layout: rank 0 and rank 2");
}

// One rank's bad argument to a collective entry point fails every rank with
// that rank's error, quickly: the peers are not left in the next collective.
TEST(InitValidationTest, OneRanksBadArgumentFailsEveryRankTheSameWay) {
  simulate::ClusterOptions options;
  options.collective_timeout = std::chrono::seconds(60);
  SimulatedCluster cluster(3, options);
  const auto start = std::chrono::steady_clock::now();
  auto messages = cluster.Run([](RankContext& ctx) -> std::vector<std::string> {
    std::vector<std::string> out;
    auto st = Ones(ChunkShardingSpec::OnRanks(0, 3), {6, 4}, {}, ctx.pg);
    auto msg = [](const absl::Status& s) { return s.ok() ? std::string("ok") : std::string(s.message()); };
    out.push_back(msg(st->Reshard(ChunkShardingSpec::OnRanks(ctx.rank == 1 ? 5 : 1, 3)).status()));
    out.push_back(msg(st->Gather(ctx.rank == 2 ? 7 : 0).status()));
    out.push_back(msg(st->Gather(ctx.rank).status()));
    out.push_back(msg(Rand(ChunkShardingSpec::OnRanks(0, 3), {6}, 1,
                           {ctx.rank == 0 ? c10::ScalarType::Long : c10::ScalarType::Float, false}, ctx.pg)
                          .status()));
    at::Tensor full = ctx.rank == 1 ? at::ones({5, 4}) : at::Tensor();
    TensorProperties props;
    out.push_back(msg(ShardedTensor::Scatter(full, 1, ChunkShardingSpec::OnRanks(0, 3), {6, 4}, props, ctx.pg)
                          .status()));
    out.push_back(msg(st->FullTensor().status()));  // the group still works afterwards
    return out;
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  ASSERT_TRUE(messages.ok()) << messages.status();
  const std::vector<std::string> want = {
      "rank 1: chunk dim 5 is out of range for a 2-d tensor",
      "rank 2: gather destination rank 7 is outside the group of 3",
      "ranks disagree on the gather destination: rank 0 and rank 1",
      "rank 0: rand needs a floating dtype",
      "rank 1: scatter source tensor has sizes [5, 4], want [6, 4]",
      "ok",
  };
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ((*messages)[r].size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_THAT((*messages)[r][i], HasSubstr(want[i])) << "rank " << r;
  }
}

// A rank that dies before a collective: its peers get an error naming the
// collective within seconds, far below the timeout.
TEST(InitValidationTest, DeadRankReleasesPeersQuickly) {
  simulate::ClusterOptions options;
  options.collective_timeout = std::chrono::seconds(60);
  SimulatedCluster cluster(4, options);
  std::vector<std::string> peer_errors(4);
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    auto st = Ones(ChunkShardingSpec::OnRanks(0, 4), {16, 2}, {}, ctx.pg);
    if (!st.ok()) return st.status();
    if (ctx.rank == 3) throw std::runtime_error("rank 3 crashed");
    auto full = st->FullTensor();
    if (!full.ok()) peer_errors[ctx.rank] = std::string(full.status().message());
    return full.status();
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(simulate::FailedRank(status), 3) << status;
  for (int r = 0; r < 3; ++r) {
    EXPECT_THAT(peer_errors[r], HasSubstr("allgather failed: ")) << "rank " << r;
    // Gloo says "Connection closed by peer" or "Connection reset by peer".
    EXPECT_THAT(peer_errors[r], HasSubstr("by peer")) << "rank " << r;
  }
}

}  // namespace
}  // namespace shardlight::sharded
