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

TEST(PerplexityTest, NoTokensIsAnErrorNamingPerplexity) {
  Perplexity ppl;
  const absl::StatusOr<double> v = ppl.ComputeScalar();
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("metric 'Perplexity'"), std::string::npos) << v.status();
}

// Tokens whose target is ignore_index count for nothing, whether the update
// gives logits or cross_entropy's per-token losses (0 at ignored tokens).
TEST(PerplexityTest, IgnoredTokensCountForNothing) {
  const at::Tensor logits = at::tensor({0.0, 1.0, 2.0, 3.0, 0.5, 0.5}, at::kFloat).reshape({1, 2, 3});
  const at::Tensor target = at::tensor({int64_t{2}, int64_t{-100}}).reshape({1, 2});
  const double want = std::exp(-std::log(std::exp(2.0) / (1 + std::exp(1.0) + std::exp(2.0))));
  Perplexity from_logits(-100);
  ASSERT_TRUE(from_logits.Update(logits, target).ok());
  EXPECT_NEAR(*from_logits.ComputeScalar(), want, 1e-6);
  const at::Tensor losses = at::cross_entropy_loss(logits.reshape({2, 3}), target.reshape({2}), {},
                                                   at::Reduction::None, -100);
  Perplexity from_losses(-100);
  ASSERT_TRUE(from_losses.Update(losses.reshape({1, 2}), target).ok());
  EXPECT_NEAR(*from_losses.ComputeScalar(), want, 1e-6);
}

TEST(PerplexityTest, TargetOutsideTheVocabularyIsRejected) {
  Perplexity ppl(-100);
  const absl::Status s = ppl.Update(at::zeros({1, 2, 3}), at::tensor({int64_t{1}, int64_t{3}}).reshape({1, 2}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("metric 'Perplexity': target holds a token id outside [0, 3)"), std::string::npos) << s;
}

}  // namespace
}  // namespace shardlight::lightning::metrics
