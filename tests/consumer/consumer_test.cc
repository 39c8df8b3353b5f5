// Compiled in a separate workspace: proves @shardlight targets, deps.bzl and
// the include paths work from outside the repository.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "simulate/simulated_cluster.h"

TEST(ConsumerTest, RunsAThreeRankAllreduce) {
  shardlight::simulate::SimulatedCluster cluster(3);
  auto sums = cluster.Run([](shardlight::simulate::RankContext& ctx) {
    std::vector<at::Tensor> t = {at::ones({1})};
    ctx.pg->allreduce(t)->wait();
    return t[0].item<float>();
  });
  ASSERT_TRUE(sums.ok()) << sums.status();
  for (float s : *sums) EXPECT_EQ(s, 3.0f);
}
