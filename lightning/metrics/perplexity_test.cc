// Perplexity on 2 thread-ranks with 3 and 1 tokens: exp of the mean over all
// 4 tokens (not the mean of the ranks' perplexities); no tokens is an error.
#include "lightning/metrics/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>

#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning::metrics {
namespace {

TEST(PerplexityTest, PoolsTokensOverRanks) {
  simulate::SimulatedCluster cluster(2);
  std::vector<double> values(2);
  const absl::Status status = cluster.Run([&](simulate::RankContext& ctx) -> absl::Status {
    Perplexity ppl;
    if (absl::Status s = ppl.Bind(ctx.pg); !s.ok()) return s;
    const at::Tensor losses = ctx.rank == 0 ? at::tensor({1.0, 2.0, 3.0}, at::kFloat) : at::tensor({6.0}, at::kFloat);
    if (absl::Status s = ppl.Update(losses); !s.ok()) return s;
    absl::StatusOr<double> v = ppl.ComputeScalar();
    if (!v.ok()) return v.status();
    values[ctx.rank] = *v;
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  for (double v : values) EXPECT_NEAR(v, std::exp(3.0), 1e-9);
}

TEST(PerplexityTest, NoTokensIsAnError) {
  Perplexity ppl;
  EXPECT_FALSE(ppl.ComputeScalar().ok());
}

}  // namespace
}  // namespace shardlight::lightning::metrics
