#include "simulate/core/simulated_cluster.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "absl/strings/str_cat.h"
#include "sharded/agreement.h"
#include "sharded/collectives.h"
#include "sharded/rank_monitor.h"
#include "sharded/status_macros.h"

namespace shardlight::simulate {
namespace {

using ::testing::HasSubstr;

ClusterOptions FastOptions() {
  ClusterOptions options;
  options.collective_timeout = std::chrono::seconds(10);
  return options;
}

class CollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesTest, AllreduceSumsRankValues) {
  const int w = GetParam();
  SimulatedCluster cluster(w, FastOptions());
  auto sums = cluster.Run([](RankContext& ctx) {
    std::vector<at::Tensor> t = {at::full({3}, ctx.rank + 1, at::kFloat)};
    ctx.pg->allreduce(t)->wait();
    return t[0][2].item<float>();
  });
  ASSERT_TRUE(sums.ok()) << sums.status();
  for (float s : *sums) EXPECT_EQ(s, w * (w + 1) / 2);
}

TEST_P(CollectivesTest, AllgatherCollectsEveryRank) {
  const int w = GetParam();
  SimulatedCluster cluster(w, FastOptions());
  auto gathered = cluster.Run([](RankContext& ctx) {
    std::vector<at::Tensor> in = {at::full({2}, ctx.rank * 10, at::kLong)};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < ctx.world_size; ++r) out[0].push_back(at::empty({2}, at::kLong));
    ctx.pg->allgather(out, in)->wait();
    std::vector<int64_t> firsts;
    for (auto& t : out[0]) firsts.push_back(t[1].item<int64_t>());
    return firsts;
  });
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  for (const auto& firsts : *gathered) {
    ASSERT_EQ(firsts.size(), static_cast<size_t>(w));
    for (int r = 0; r < w; ++r) EXPECT_EQ(firsts[r], r * 10);
  }
}

TEST_P(CollectivesTest, BroadcastFromLastRank) {
  const int w = GetParam();
  SimulatedCluster cluster(w, FastOptions());
  auto values = cluster.Run([](RankContext& ctx) {
    std::vector<at::Tensor> t = {at::full({4}, ctx.rank == ctx.world_size - 1 ? 42.0 : -1.0, at::kDouble)};
    c10d::BroadcastOptions opts;
    opts.rootRank = ctx.world_size - 1;
    ctx.pg->broadcast(t, opts)->wait();
    return t[0].sum().item<double>();
  });
  ASSERT_TRUE(values.ok()) << values.status();
  for (double v : *values) EXPECT_EQ(v, 4 * 42.0);
}

TEST_P(CollectivesTest, GatherToRootOnly) {
  const int w = GetParam();
  SimulatedCluster cluster(w, FastOptions());
  auto results = cluster.Run([](RankContext& ctx) {
    const int root = ctx.world_size / 2;
    std::vector<at::Tensor> in = {at::full({1}, ctx.rank + 100, at::kInt)};
    std::vector<std::vector<at::Tensor>> out;
    if (ctx.rank == root) {
      out.resize(1);
      for (int r = 0; r < ctx.world_size; ++r) out[0].push_back(at::empty({1}, at::kInt));
    }
    c10d::GatherOptions opts;
    opts.rootRank = root;
    ctx.pg->gather(out, in, opts)->wait();
    std::vector<int> got;
    if (ctx.rank == root) {
      for (auto& t : out[0]) got.push_back(t.item<int>());
    }
    return got;
  });
  ASSERT_TRUE(results.ok()) << results.status();
  for (int r = 0; r < w; ++r) {
    if (r == w / 2) {
      ASSERT_EQ((*results)[r].size(), static_cast<size_t>(w));
      for (int s = 0; s < w; ++s) EXPECT_EQ((*results)[r][s], s + 100);
    } else {
      EXPECT_TRUE((*results)[r].empty());
    }
  }
}

// Payloads of uneven lengths (an empty one, one far longer than the rest)
// reach the root only, whole and in rank order; every other rank gets none.
TEST_P(CollectivesTest, AgreeAndGatherToGivesTheRootEveryPayloadAndOthersNone) {
  const int w = GetParam();
  auto payload_of = [](int rank) {
    if (rank == 1) return std::string();
    std::string p(rank == 0 ? 300000 : 10 + rank, static_cast<char>('a' + rank % 26));
    p.back() = '\n';
    return p;
  };
  for (const int root : {0, w - 1}) {
    SimulatedCluster cluster(w, FastOptions());
    auto results = cluster.Run([&](RankContext& ctx) {
      return sharded::AgreeAndGatherTo(*ctx.pg, root, {absl::OkStatus(), 7, payload_of(ctx.rank)}, {"records"});
    });
    ASSERT_TRUE(results.ok()) << results.status();
    for (int r = 0; r < w; ++r) {
      const std::vector<std::string>& got = (*results)[r];
      if (r != root) {
        EXPECT_TRUE(got.empty()) << "rank " << r;
        continue;
      }
      ASSERT_EQ(got.size(), static_cast<size_t>(w));
      for (int s = 0; s < w; ++s) EXPECT_EQ(got[s], payload_of(s)) << "payload of rank " << s;
    }
  }
}

// A failing rank's error, and disagreeing fingerprints (from two ranks on),
// reach every rank before any payload moves.
TEST_P(CollectivesTest, AgreeAndGatherToAgreesFirst) {
  const int w = GetParam();
  SimulatedCluster cluster(w, FastOptions());
  // Each rank's outcome as (code, message): a rank's error is the value.
  auto outcome = [](const absl::Status& s) { return std::make_pair(s.code(), std::string(s.message())); };
  auto results = cluster.Run([&](RankContext& ctx) {
    const absl::Status mine = ctx.rank == w - 1 ? absl::DataLossError("disk gone") : absl::OkStatus();
    return outcome(sharded::AgreeAndGatherTo(*ctx.pg, 0, {mine, 0, std::string(100, 'x')}, {"save"}).status());
  });
  ASSERT_TRUE(results.ok()) << results.status();
  for (const auto& [code, message] : *results) {
    EXPECT_EQ(code, absl::StatusCode::kDataLoss);
    EXPECT_EQ(message, absl::StrCat("save failed on rank ", w - 1, ": disk gone"));
  }
  if (w == 1) return;  // one rank cannot disagree with another
  results = cluster.Run([&](RankContext& ctx) {
    const uint64_t fingerprint = ctx.rank == 1 ? 2 : 1;
    return outcome(sharded::AgreeAndGatherTo(*ctx.pg, 0, {absl::OkStatus(), fingerprint, "p"}, {"save", "plan"})
                       .status());
  });
  ASSERT_TRUE(results.ok()) << results.status();
  for (const auto& [code, message] : *results) {
    EXPECT_EQ(code, absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(message, HasSubstr("ranks disagree on the plan: rank 0 and rank 1"));
  }
}

// Strings of every length around a slot's capacity (248 bytes) reach every
// rank whole and in rank order: one exchange (a gather and a broadcast,
// counted once) while all fit their slots, a second (the rest of the long
// ones) when one does not.
TEST_P(CollectivesTest, AllgatherStringsOfEveryLengthAroundTheSlot) {
  const int w = GetParam();
  auto string_of = [](int rank, bool long_one) {
    static constexpr int kLengths[] = {0, 1, 247, 248, 17, 100};
    const int n = long_one && rank == 1 ? 5249 : kLengths[rank % 6];
    std::string s(static_cast<size_t>(n), '\0');
    for (int i = 0; i < n; ++i) s[static_cast<size_t>(i)] = static_cast<char>((rank * 31 + i * 7) % 256);
    return s;
  };
  for (const bool long_one : {false, true}) {
    SimulatedCluster cluster(w, FastOptions());
    auto results = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::pair<std::vector<std::string>, int64_t>> {
      auto monitor = sharded::RankMonitor::Of(*ctx.pg);
      if (monitor == nullptr) return absl::InternalError("no rank monitor");
      const int64_t before = monitor->arrivals();
      SL_ASSIGN_OR_RETURN(std::vector<std::string> all,
                          sharded::AllgatherStrings(*ctx.pg, string_of(ctx.rank, long_one)));
      return std::make_pair(std::move(all), monitor->arrivals() - before);
    });
    ASSERT_TRUE(results.ok()) << results.status();
    const bool longer = long_one && w > 1;  // rank 1 holds the long string
    for (int r = 0; r < w; ++r) {
      const auto& [all, collectives] = (*results)[r];
      EXPECT_EQ(collectives, longer ? 2 : 1) << "rank " << r << (long_one ? ", one long string" : "");
      ASSERT_EQ(all.size(), static_cast<size_t>(w)) << "rank " << r;
      for (int s = 0; s < w; ++s) EXPECT_EQ(all[s], string_of(s, long_one)) << "rank " << r << " got rank " << s;
    }
  }
}

TEST_P(CollectivesTest, ScatterFromRootGivesEachRankItsSlice) {
  const int w = GetParam();
  SimulatedCluster cluster(w, FastOptions());
  auto results = cluster.Run([](RankContext& ctx) {
    std::vector<at::Tensor> out = {at::empty({2}, at::kFloat)};
    std::vector<std::vector<at::Tensor>> in;
    if (ctx.rank == 0) {
      in.resize(1);
      for (int r = 0; r < ctx.world_size; ++r) in[0].push_back(at::full({2}, r * 3.5, at::kFloat));
    }
    ctx.pg->scatter(out, in)->wait();
    return out[0][0].item<float>();
  });
  ASSERT_TRUE(results.ok()) << results.status();
  for (int r = 0; r < w; ++r) EXPECT_EQ((*results)[r], r * 3.5f);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectivesTest, ::testing::Values(1, 2, 3, 4, 8, 16),
                         [](const auto& info) { return absl::StrCat("W", info.param); });

TEST(SimulatedClusterTest, SixtyFourRanksComplete) {
  SimulatedCluster cluster(64, FastOptions());
  auto ranks = cluster.Run([](RankContext& ctx) {
    std::vector<at::Tensor> t = {at::ones({1}, at::kLong)};
    ctx.pg->allreduce(t)->wait();
    EXPECT_EQ(t[0].item<int64_t>(), 64);
    return ctx.rank;
  });
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  for (int r = 0; r < 64; ++r) EXPECT_EQ((*ranks)[r], r);
}

TEST(SimulatedClusterTest, ThrowingRankFailsRunQuicklyAndClusterIsReusable) {
  ClusterOptions options;
  options.collective_timeout = std::chrono::seconds(60);  // far above the bound checked below
  SimulatedCluster cluster(4, options);
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = cluster.Run([](RankContext& ctx) {
    std::vector<at::Tensor> t = {at::ones({8})};
    ctx.pg->allreduce(t)->wait();
    if (ctx.rank == 2) throw std::runtime_error("injected failure at step 1");
    ctx.pg->allreduce(t)->wait();  // peers block here until rank 2's group is gone
    ctx.pg->allreduce(t)->wait();
  });
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("rank 2: exception: injected failure at step 1"));
  EXPECT_EQ(FailedRank(status), 2);
  EXPECT_LT(elapsed, std::chrono::seconds(20)) << "peers waited for the collective timeout";

  auto again = cluster.Run([](RankContext& ctx) {
    std::vector<at::Tensor> t = {at::ones({1})};
    ctx.pg->allreduce(t)->wait();
    return t[0].item<float>();
  });
  ASSERT_TRUE(again.ok()) << again.status();
  for (float v : *again) EXPECT_EQ(v, 4.0f);
}

TEST(SimulatedClusterTest, StatusErrorIsReturnedWithItsCodeAndRank) {
  SimulatedCluster cluster(3, FastOptions());
  absl::StatusOr<std::vector<int>> result = cluster.Run([](RankContext& ctx) -> absl::StatusOr<int> {
    if (ctx.rank == 1) return absl::FailedPreconditionError("no shards here");
    return ctx.rank;
  });
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(result.status().message(), "rank 1: no shards here");
  EXPECT_EQ(FailedRank(result.status()), 1);
}

// A peer's lost connection is a symptom; the rank that failed for its own
// reason is reported even when it failed later.
TEST(SimulatedClusterTest, RootCauseIsPreferredOverPeerSymptoms) {
  SimulatedCluster cluster(3, FastOptions());
  absl::Status status = cluster.Run([](RankContext& ctx) -> absl::Status {
    if (ctx.rank == 0) return absl::UnavailableError("allgather failed: Connection closed by peer");
    if (ctx.rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      return absl::DataLossError("checksum mismatch");
    }
    return absl::OkStatus();
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(FailedRank(status), 2);
  // With symptoms only, the first of them is reported.
  status = cluster.Run([](RankContext& ctx) -> absl::Status {
    if (ctx.rank == 1) return absl::DeadlineExceededError("timed out");
    return absl::OkStatus();
  });
  EXPECT_EQ(FailedRank(status), 1);
  EXPECT_EQ(status.message(), "rank 1: timed out");
}

// Issue 15, defect 6: when every rank returns one agreed error, the rank it
// names as failing is reported, not whichever rank returned first.
TEST(SimulatedClusterTest, AgreedErrorIsReportedForTheFailingRank) {
  SimulatedCluster cluster(5, FastOptions());
  absl::Status status = cluster.Run([](RankContext& ctx) -> absl::Status {
    const absl::Status mine = ctx.rank == 4 ? absl::AbortedError("disk full") : absl::OkStatus();
    absl::Status agreed = sharded::Agree(*ctx.pg, mine, "save");
    if (ctx.rank != 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0 returns first
    return agreed;
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(FailedRank(status), 4);
  EXPECT_EQ(status.message(), "rank 4: save failed on rank 4: disk full");
}

TEST(SimulatedClusterTest, SlowRankTurnsIntoTimeoutNotHang) {
  ClusterOptions options;
  options.collective_timeout = std::chrono::milliseconds(1500);
  SimulatedCluster cluster(2, options);
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = cluster.Run([](RankContext& ctx) {
    std::vector<at::Tensor> t = {at::ones({1})};
    if (ctx.rank == 1) std::this_thread::sleep_for(std::chrono::seconds(4));
    ctx.pg->allreduce(t)->wait();
  });
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(FailedRank(status), 0) << status;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
}

// Ranks that never communicate must not break a slower peer's setup: run
// many times so a race between one rank's teardown and another's connection
// handshake would show.
TEST(SimulatedClusterTest, RanksWithoutCommunicationFinishCleanly) {
  SimulatedCluster cluster(4, FastOptions());
  for (int i = 0; i < 30; ++i) {
    auto ranks = cluster.Run([](RankContext& ctx) { return ctx.rank; });
    ASSERT_TRUE(ranks.ok()) << "run " << i << ": " << ranks.status();
  }
}

TEST(SimulatedClusterTest, RejectsBadWorldSize) {
  for (int w : {0, -1, 65}) {
    SimulatedCluster cluster(w);
    absl::Status status = cluster.Run([](RankContext&) {});
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << w;
    EXPECT_THAT(std::string(status.message()), HasSubstr(absl::StrCat("world size ", w)));
  }
}

}  // namespace
}  // namespace shardlight::simulate
