// ModelParallelStrategy under the Trainer, on the simulated cluster: a small
// tensor-parallel MLP (column- then row-parallel, //lightning/tp) trains to
// the same losses and reduced, clipped gradients on every DP x TP mesh (uneven and empty TP and DP shards
// included); a DP group failing in its step fails every rank naming it; a
// missing or non-2-d mesh, or a dense parameter, is refused on every rank before any collective.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lightning/strategies/model_parallel_strategy.h"
#include "lightning/strategies/tp_test_model.h"
#include "lightning/tp/mesh_optimizer.h"
#include "lightning/tp/parallel_linear.h"
#include "lightning/trainer.h"
#include "sharded/mesh/device_mesh.h"
#include "sharded/status_macros.h"
#include "sharded/sharding_spec.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;
using ::testing::HasSubstr;

using tp_testing::MeshContextOf;
using tp_testing::TinyData;
using tp_testing::TinyTp;

struct Outcome {
  std::vector<absl::StatusOr<FitResult>> ranks;
  at::Tensor fc_grad;  // rank 0's fc weight gradient slice after the last step (reduced, clipped)
};

// Every rank's Fit on a mesh of `shape` (empty: no mesh); clipped to a global
// norm of 0.5, or by value when clip_value > 0.
Outcome Train(std::vector<int64_t> shape, int world, int fail_dp = -1, bool dense = false, double clip_value = 0) {
  Outcome out;
  out.ranks.resize(world, absl::UnknownError("not run"));
  simulate::ClusterOptions options;
  options.collective_timeout = std::chrono::seconds(5);
  SimulatedCluster cluster(world, options);
  const absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    sharded::mesh::MeshPtr mesh;
    if (!shape.empty()) {
      absl::StatusOr<sharded::mesh::MeshPtr> made = sharded::mesh::DeviceMesh::Create(MeshContextOf(ctx), shape, "t");
      if (!made.ok()) return made.status();
      mesh = *made;
    }
    TinyTp model(fail_dp, 2, dense);
    TrainerOptions o;
    o.max_steps = 4;
    o.seed = 3;
    o.gradient_clip_norm = clip_value > 0 ? 0 : 0.5;  // below the norms: every step clips
    o.gradient_clip_value = clip_value;
    o.strategy = std::make_shared<ModelParallelStrategy>(mesh);
    out.ranks[ctx.rank] = Trainer(o).Fit(model, TinyData(), ctx.pg);
    if (ctx.rank == 0 && out.ranks[0].ok()) out.fc_grad = model.fc_grad().clone();
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

// An LR schedule sets the rate through Optimizer::set_lr: the mesh AdamW
// must step with it (it kept its own, so a schedule never reached it).
TEST(ModelParallelStrategyTest, MeshAdamWFollowsTheScheduledRate) {
  auto adam = tp::MeshAdamWOptimizer::Create({}, {0.05, 0.9, 0.99, 1e-8, 0.01});
  ASSERT_TRUE(adam.ok()) << adam.status();
  EXPECT_EQ((*adam)->lr(), 0.05);
  ASSERT_TRUE((*adam)->set_lr(0.0125).ok());
  EXPECT_EQ((*adam)->lr(), 0.0125);
  EXPECT_EQ((*adam)->adam().lr(), 0.0125);
  EXPECT_FALSE((*adam)->set_lr(-1).ok());
  EXPECT_EQ((*adam)->adam().lr(), 0.0125);
}

TEST(ModelParallelStrategyTest, EveryMeshTrainsTheSame) {
  const Outcome one = Train({1, 1}, 1);
  ASSERT_TRUE(one.ranks[0].ok()) << one.ranks[0].status();
  const std::vector<double>& want = one.ranks[0]->losses;
  ASSERT_EQ(want.size(), 4u);
  EXPECT_LT(want.back(), want.front());
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{2, 1}, {1, 2}, {2, 2}, {1, 4}, {3, 1}, {3, 2}}) {
    const int world = static_cast<int>(shape[0] * shape[1]);
    const Outcome run = Train(shape, world);
    const std::string name = absl::StrCat(shape[0], "x", shape[1]);
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(run.ranks[r].ok()) << name << " rank " << r << ": " << run.ranks[r].status();
      ASSERT_EQ(run.ranks[r]->losses.size(), want.size()) << name;
      for (size_t s = 0; s < want.size(); ++s) {
        EXPECT_NEAR(run.ranks[r]->losses[s], want[s], 1e-5 * std::abs(want[s])) << name << " rank " << r << " step " << s;
      }
    }
    // Rank 0 holds fc's first rows (torch.chunk over TP): its reduced, clipped gradient is the 1x1 run's rows.
    ASSERT_TRUE(run.fc_grad.defined()) << name;
    const at::Tensor want_rows = one.fc_grad.narrow(0, 0, run.fc_grad.size(0));
    EXPECT_TRUE(at::allclose(run.fc_grad, want_rows, 1e-4, 1e-6)) << name << ": " << run.fc_grad << " vs " << want_rows;
  }
}

// Clipping by value clamps the mesh members' gradients (which the Trainables
// do not describe): the last step's reduced gradient is within the clip on
// every mesh, every mesh trains as 1x1 does, and otherwise than a norm clip.
TEST(ModelParallelStrategyTest, ClippingByValueClampsTheMeshMembers) {
  constexpr double kClip = 1e-3;
  const double clip_f32 = static_cast<float>(kClip);  // the gradients are float32: the clamp's bound is this
  const Outcome one = Train({1, 1}, 1, -1, false, kClip);
  ASSERT_TRUE(one.ranks[0].ok()) << one.ranks[0].status();
  const std::vector<double>& want = one.ranks[0]->losses;
  EXPECT_LE(one.fc_grad.abs().max().item<double>(), clip_f32);
  const Outcome norm_clipped = Train({1, 1}, 1);
  ASSERT_TRUE(norm_clipped.ranks[0].ok());
  double changed = 0;
  for (size_t s = 0; s < want.size(); ++s) changed = std::max(changed, std::abs(want[s] - norm_clipped.ranks[0]->losses[s]));
  EXPECT_GT(changed, 1e-6) << "clipping by value trained as the norm clip does";
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{2, 2}, {1, 2}, {3, 2}}) {
    const int world = static_cast<int>(shape[0] * shape[1]);
    const Outcome run = Train(shape, world, -1, false, kClip);
    const std::string name = absl::StrCat(shape[0], "x", shape[1]);
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(run.ranks[r].ok()) << name << " rank " << r << ": " << run.ranks[r].status();
      for (size_t s = 0; s < want.size(); ++s) {
        EXPECT_NEAR(run.ranks[r]->losses[s], want[s], 1e-5 * std::abs(want[s])) << name << " rank " << r << " step " << s;
      }
    }
    ASSERT_TRUE(run.fc_grad.defined()) << name;
    EXPECT_LE(run.fc_grad.abs().max().item<double>(), clip_f32) << name;
  }
}

TEST(ModelParallelStrategyTest, AFailedStepFailsEveryRankNamingIt) {
  const Outcome run = Train({2, 2}, 4, /*fail_dp=*/1);
  for (int r = 0; r < 4; ++r) {
    ASSERT_FALSE(run.ranks[r].ok()) << "rank " << r << " trained";
    EXPECT_THAT(std::string(run.ranks[r].status().message()), HasSubstr("training step 2 failed on rank 2"))
        << "rank " << r;
    EXPECT_THAT(std::string(run.ranks[r].status().message()), HasSubstr("batch unreadable")) << "rank " << r;
  }
}

TEST(ModelParallelStrategyTest, AMeshThatIsNotDpByTpFailsEveryRank) {
  Outcome run = Train({}, 2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(run.ranks[r].ok());
    EXPECT_THAT(std::string(run.ranks[r].status().message()), HasSubstr("model_parallel needs a device mesh")) << r;
  }
  run = Train({1, 1, 2}, 2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(run.ranks[r].ok());
    EXPECT_THAT(std::string(run.ranks[r].status().message()), HasSubstr("needs a 2-d mesh")) << r;
  }
  run = Train({1, 2}, 2, -1, /*dense=*/true);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(run.ranks[r].ok());
    EXPECT_THAT(std::string(run.ranks[r].status().message()), HasSubstr("has the dense parameter 'scale'")) << r;
  }
}

}  // namespace
}  // namespace shardlight::lightning
