// FsdpStrategy on the project's EmbeddingMlp, whose sharded embedding table
// (a ShardedTensor member, gradients local) feeds dense layers that fsdp
// shards (fc2's weight [1, 16] leaves every rank but 0 an empty chunk), and
// where a rank that scores no row of a batch has no gradient for them: the
// same losses as ddp, and a checkpoint of either resumes under the other.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lightning/strategies/fsdp_strategy.h"
#include "lightning/trainer.h"
#include "simulate/core/simulated_cluster.h"
#include "simulate/embedding_mlp.h"

namespace shardlight {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;

constexpr uint64_t kSeed = 11;

absl::StatusOr<std::vector<double>> Losses(RankContext& ctx, bool fsdp, int64_t max_steps, const std::string& dir) {
  simulate::EmbeddingMlp module;
  lightning::TrainerOptions options;
  options.max_steps = max_steps;
  options.seed = kSeed;
  options.checkpoint_dir = dir;
  if (fsdp) options.strategy = std::make_shared<lightning::FsdpStrategy>(lightning::FsdpOptions{{"fc1"}});
  simulate::SyntheticRegression data(96, 6, kSeed);  // 6 rows a batch: some ranks score none
  auto fit = lightning::Trainer(options).Fit(module, data, ctx.pg);
  if (!fit.ok()) return fit.status();
  return fit->losses;
}

std::string Dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/trainer_fsdp_", name);
  std::filesystem::remove_all(dir);
  return dir;
}

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i])) << what << " " << i;
}

TEST(TrainerFsdpTest, ShardedMembersAndShardedParametersTrainAsDdp) {
  for (int w : {2, 4}) {
    SimulatedCluster cluster(w);
    auto ddp = cluster.Run([&](RankContext& ctx) { return Losses(ctx, false, 8, ""); });
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    auto fsdp = cluster.Run([&](RankContext& ctx) { return Losses(ctx, true, 8, ""); });
    ASSERT_TRUE(fsdp.ok()) << fsdp.status();
    ExpectNear((*fsdp)[0], (*ddp)[0], absl::StrCat("W=", w));
    const std::vector<double> tail((*ddp)[0].begin() + 4, (*ddp)[0].end());
    // A ddp checkpoint at W resumes under fsdp at 3, and back.
    const std::string from_ddp = Dir(absl::StrCat("ddp_", w));
    ASSERT_TRUE(cluster.Run([&](RankContext& ctx) { return Losses(ctx, false, 4, from_ddp); }).ok());
    SimulatedCluster three(3);
    auto under_fsdp = three.Run([&](RankContext& ctx) { return Losses(ctx, true, 8, from_ddp); });
    ASSERT_TRUE(under_fsdp.ok()) << under_fsdp.status();
    ExpectNear((*under_fsdp)[0], tail, absl::StrCat("ddp W=", w, " -> fsdp W=3"));
    const std::string from_fsdp = Dir(absl::StrCat("fsdp_", w));
    ASSERT_TRUE(cluster.Run([&](RankContext& ctx) { return Losses(ctx, true, 4, from_fsdp); }).ok());
    auto under_ddp = three.Run([&](RankContext& ctx) { return Losses(ctx, false, 8, from_fsdp); });
    ASSERT_TRUE(under_ddp.ok()) << under_ddp.status();
    ExpectNear((*under_ddp)[0], tail, absl::StrCat("fsdp W=", w, " -> ddp W=3"));
  }
}

}  // namespace
}  // namespace shardlight
