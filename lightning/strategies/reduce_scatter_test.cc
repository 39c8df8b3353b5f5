// ReduceScatterSlots: the same sums through c10d's reduce_scatter (where the
// probe finds it) and through allreduce + narrow, with uneven values per rank.
#include "lightning/strategies/reduce_scatter.h"

#include <gtest/gtest.h>

#include <iostream>
#include <vector>

#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;

TEST(ReduceScatterTest, ProbeAndBothPathsGiveEachRankItsSlotOfTheSum) {
  for (int w : {1, 2, 3}) {
    SimulatedCluster cluster(w);
    auto results = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<bool> {
      auto probed = ProbeReduceScatter(*ctx.pg);
      if (!probed.ok()) return probed.status();
      for (bool reduce_scatter : {false, *probed}) {
        std::vector<at::Tensor> slots;  // rank r sends (r + 1) * [10 j, 10 j + 1, 10 j + 2] to slot j
        for (int j = 0; j < w; ++j) slots.push_back(at::arange(3, at::kFloat).add(10.0 * j).mul(ctx.rank + 1));
        auto mine = ReduceScatterSlots(*ctx.pg, slots, reduce_scatter, "test");
        if (!mine.ok()) return mine.status();
        const at::Tensor want = at::arange(3, at::kFloat).add(10.0 * ctx.rank).mul(w * (w + 1) / 2.0);
        if (!at::equal(*mine, want)) return absl::InternalError("wrong sums");
      }
      return *probed;
    });
    ASSERT_TRUE(results.ok()) << results.status();
    for (bool probed : *results) EXPECT_EQ(probed, (*results)[0]) << "every rank takes the same path";
    std::cout << "W=" << w << ": c10d reduce_scatter " << ((*results)[0] ? "used" : "not available: allreduce + narrow")
              << "\n";
  }
}

}  // namespace
}  // namespace shardlight::lightning
