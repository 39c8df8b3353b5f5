// ProbeFlatAllGather: every rank gets the same answer at W = 1, 2, 3, and
// LibTorch 2.x's Gloo (c10d groups over Backend objects) runs the flat
// all-gather -- FSDP would silently fall back to the list form if it did not.
#include "lightning/strategies/flat_all_gather.h"

#include <gtest/gtest.h>

#include <iostream>

#include "sharded/compat/c10d_compat.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;

TEST(FlatAllGatherTest, ProbeAgreesOnEveryRankAndFindsTorch2Gloo) {
  for (int w : {1, 2, 3}) {
    SimulatedCluster cluster(w);
    auto results = cluster.Run([&](RankContext& ctx) { return ProbeFlatAllGather(*ctx.pg); });
    ASSERT_TRUE(results.ok()) << results.status();
    for (bool flat : *results) EXPECT_EQ(flat, (*results)[0]) << "every rank takes the same path";
    if (w == 1 || sharded::compat::GroupsDispatchToBackends()) EXPECT_TRUE((*results)[0]) << "W=" << w;
    std::cout << "W=" << w << ": flat all-gather " << ((*results)[0] ? "used" : "not available: list all-gather")
              << "\n";
  }
}

}  // namespace
}  // namespace shardlight::lightning
