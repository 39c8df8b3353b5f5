// DistributedSampler on thread-ranks at several world sizes (uneven slices,
// empty ranks): each step's slices partition the global batch, which does not
// depend on the world size; epochs are seeded permutations; a Trainer resumed
// mid-epoch on another world size trains on the uninterrupted run's batches.
#include "lightning/data/distributed_sampler.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lightning/lightning_module.h"
#include "lightning/trainer.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning::data {
namespace {

constexpr int64_t kSize = 23;

DistributedSampler Make(int64_t batch, int dp_size, int dp_rank, uint64_t seed = 7) {
  return *DistributedSampler::Create({kSize, batch, dp_size, dp_rank, true, seed});
}

TEST(DistributedSamplerTest, SlicesPartitionTheGlobalBatchAtEveryWorldSize) {
  for (int64_t batch : {3, 4}) {
    const DistributedSampler one = Make(batch, 1, 0);
    EXPECT_EQ(one.steps_per_epoch(), kSize / batch);
    for (int w = 1; w <= 5; ++w) {  // batch 3 over 4 or 5 ranks: empty ranks
      for (int64_t step = 0; step < 3 * one.steps_per_epoch(); ++step) {
        std::vector<at::Tensor> slices;
        for (int r = 0; r < w; ++r) {
          slices.push_back(Make(batch, w, r).Indices(step));
          EXPECT_LE(std::abs(slices.back().numel() - batch / w), 1) << "w=" << w << " r=" << r;
        }
        EXPECT_TRUE(at::equal(at::cat(slices), one.GlobalIndices(step))) << "w=" << w << " step=" << step;
      }
    }
  }
  EXPECT_EQ(Make(3, 4, 0).Indices(0).numel(), 0);  // 3 rows over 4 ranks: rank 0 has none
}

TEST(DistributedSamplerTest, EachEpochIsASeededPermutation) {
  const DistributedSampler s = Make(4, 1, 0);
  for (int64_t e = 0; e < 3; ++e) {
    EXPECT_TRUE(at::equal(std::get<0>(s.EpochOrder(e).sort()), at::arange(kSize, at::kLong)));
    // An epoch's global batches are its order, in turn, the remainder dropped.
    std::vector<at::Tensor> batches;
    for (int64_t k = 0; k < s.steps_per_epoch(); ++k) batches.push_back(s.GlobalIndices(e * s.steps_per_epoch() + k));
    EXPECT_TRUE(at::equal(at::cat(batches), s.EpochOrder(e).narrow(0, 0, 20)));
  }
  EXPECT_FALSE(at::equal(s.EpochOrder(0), s.EpochOrder(1)));
  EXPECT_TRUE(at::equal(s.EpochOrder(1), Make(4, 1, 0).EpochOrder(1)));
  EXPECT_FALSE(at::equal(s.EpochOrder(0), Make(4, 1, 0, /*seed=*/8).EpochOrder(0)));
  EXPECT_TRUE(at::equal(Make(4, 1, 0, 6).EpochOrder(1), s.EpochOrder(0)));  // seed + epoch, as torch
  const auto plain = *DistributedSampler::Create({kSize, 4, 1, 0, /*shuffle=*/false, 7});
  EXPECT_TRUE(at::equal(plain.GlobalIndices(6), at::arange(4, 8, at::kLong)));
}

TEST(DistributedSamplerTest, BadOptionsAreNamed) {
  auto message = [](SamplerOptions o) { return std::string(DistributedSampler::Create(o).status().message()); };
  EXPECT_EQ(message({kSize, 0, 1, 0}), "sampler: global_batch must be >= 1, got 0");
  EXPECT_EQ(message({3, 4, 1, 0}), "sampler: the data set's size 3 is less than one global_batch (4)");
  EXPECT_EQ(message({kSize, 4, 2, 2}), "sampler: dp_rank 2 is outside [0, dp_size 2)");
}

// The samples each global step trained on, over every rank.
using Seen = std::map<int64_t, std::set<int64_t>>;

struct Recorder : LightningModule {
  Recorder(Seen* seen, std::mutex* mu) : LightningModule("Recorder"), seen(seen), mu(mu) {
    w = register_parameter("w", at::ones({1}));
  }
  absl::StatusOr<at::Tensor> TrainingStep(const Batch& b, const StepContext& ctx) override {
    std::lock_guard<std::mutex> lock(*mu);
    for (int64_t i = 0; i < b[0].numel(); ++i) (*seen)[ctx.step].insert(b[0][i].item<int64_t>());
    return (w * w).sum() * (static_cast<double>(b[0].numel()) / 4.0);
  }
  Seen* seen;
  std::mutex* mu;
  at::Tensor w;
};

absl::Status Fit(int w, int64_t steps, const std::string& dir, Seen& seen) {
  std::mutex mu;
  simulate::SimulatedCluster cluster(w);
  return cluster.Run([&](simulate::RankContext& ctx) -> absl::Status {
    Recorder model(&seen, &mu);
    SL_ASSIGN_OR_RETURN(DistributedSampler sampler,
                        DistributedSampler::Create({kSize, 4, ctx.world_size, ctx.rank, true, 11}));
    SampledDataSource data(sampler, [](const at::Tensor& indices) { return Batch{indices}; });
    TrainerOptions options;
    options.max_steps = steps;
    options.checkpoint_dir = dir;
    options.checkpoint_every = 3;
    return Trainer(options).Fit(model, data, ctx.pg).status();
  });
}

TEST(DistributedSamplerTest, ResumeMidEpochOnAnotherWorldSizeSeesTheSameBatches) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/sampler_resume");
  std::filesystem::remove_all(dir);
  Seen whole, resumed;
  ASSERT_TRUE(Fit(2, 12, "", whole).ok());
  ASSERT_TRUE(Fit(4, 7, dir, resumed).ok());  // 5 steps per epoch: stops mid-epoch 1
  ASSERT_TRUE(Fit(3, 12, dir, resumed).ok());  // resumes at 7 on 3 ranks (one gets 2 of 4 rows)
  ASSERT_EQ(whole.size(), 12u);
  EXPECT_EQ(resumed, whole);
  for (const auto& [step, samples] : whole) EXPECT_EQ(samples.size(), 4u) << step;
}

}  // namespace
}  // namespace shardlight::lightning::data
