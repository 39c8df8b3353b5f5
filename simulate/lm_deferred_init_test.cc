// The LM with GptOptions::deferred_init: the dense build registers its
// parameters without storage, fsdp/hsdp fill each rank's dim-0 chunk in
// Setup and the Trainer fills the rest (ddp: all) whole. On thread-ranks,
// with a tiny GPT whose dim-0 sizes leave some ranks uneven or EMPTY chunks
// (dim 6 on 4 ranks: 2, 2, 2, 0; MLP 4 on 3 ranks: 2, 2, 0):
//  - deferred trains bit-equal to eager (losses, eval perplexity, the state
//    each rank keeps) under per-unit fsdp at W = 1..4 (float64; float32 at
//    W = 3), whole-model fsdp at W = 4, hsdp on 2x2 and ddp at W = 1..4;
//  - a deferred model holds no parameter storage after ConfigureShardedModel,
//    and a step before materialisation fails naming the parameter.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lightning/deferred_init.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"
#include "simulate/gpt_model.h"
#include "simulate/lm_run.h"

namespace shardlight::simulate {
namespace {

LmJobOptions Tiny(at::ScalarType dtype, bool deferred) {
  LmJobOptions job;
  job.model.dim = 6;
  job.model.heads = 2;
  job.model.mlp_hidden = 4;
  job.model.layers = 3;
  job.model.context = 8;
  job.model.dtype = dtype;
  job.model.deferred_init = deferred;
  job.batch = 6;
  job.steps = 3;
  job.eval_batches = 1;
  return job;
}

std::vector<LmRankResult> RunLm(LmJobOptions job, int64_t w, const std::string& strategy, bool per_unit = true,
                                std::vector<int64_t> mesh = {}) {
  job.mesh_shape = mesh.empty() ? std::vector<int64_t>{w, 1} : mesh;
  job.strategy = strategy;
  job.fsdp_per_unit = per_unit;
  SimulatedCluster cluster(static_cast<int>(w));
  auto results = cluster.Run([&](RankContext& ctx) {
    sharded::mesh::MeshContext m;
    m.store = ctx.store;
    m.rank = ctx.rank;
    m.world_size = ctx.world_size;
    m.world = ctx.pg;
    return RunLmRank(job, m);
  });
  EXPECT_TRUE(results.ok()) << strategy << " W=" << w << ": " << results.status();
  return results.ok() ? *std::move(results) : std::vector<LmRankResult>{};
}

struct Case {
  at::ScalarType dtype;
  int64_t w;
  std::string strategy;
  bool per_unit = true;
  std::vector<int64_t> mesh;
};

TEST(LmDeferredInitTest, DeferredTrainsBitEqualToEager) {
  const std::vector<Case> cases = {
      {at::kDouble, 1, "fsdp"},           {at::kDouble, 2, "fsdp"},      {at::kDouble, 3, "fsdp"},
      {at::kDouble, 4, "fsdp"},           {at::kFloat, 3, "fsdp"},       {at::kDouble, 4, "fsdp", false},
      {at::kDouble, 4, "hsdp", true, {2, 2}}, {at::kDouble, 1, "ddp"},   {at::kDouble, 2, "ddp"},
      {at::kDouble, 3, "ddp"},            {at::kDouble, 4, "ddp"},
  };
  for (const Case& c : cases) {
    const std::string what = absl::StrCat(c.strategy, c.per_unit ? "" : " (whole model) ", " ", c10::toString(c.dtype),
                                          " W=", c.w);
    const std::vector<LmRankResult> eager = RunLm(Tiny(c.dtype, false), c.w, c.strategy, c.per_unit, c.mesh);
    const std::vector<LmRankResult> deferred = RunLm(Tiny(c.dtype, true), c.w, c.strategy, c.per_unit, c.mesh);
    ASSERT_EQ(eager.size(), static_cast<size_t>(c.w)) << what;
    ASSERT_EQ(deferred.size(), static_cast<size_t>(c.w)) << what;
    for (int64_t r = 0; r < c.w; ++r) {
      ASSERT_EQ(deferred[r].losses.size(), 3u) << what;
      EXPECT_EQ(deferred[r].losses, eager[r].losses) << what << " rank " << r;
      EXPECT_EQ(deferred[r].eval_perplexity, eager[r].eval_perplexity) << what << " rank " << r;
      EXPECT_EQ(deferred[r].state_bytes, eager[r].state_bytes) << what << " rank " << r;
    }
  }
}

TEST(LmDeferredInitTest, ADeferredModelHoldsNoStorageAndFailsNamedBeforeMaterialisation) {
  SimulatedCluster cluster(1);
  auto results = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<int> {
    GptModel model(Tiny(at::kFloat, true).model);
    const lightning::ShardedContext context{ctx.pg, ctx.rank, ctx.world_size, /*seed=*/1, nullptr};
    SL_RETURN_IF_ERROR(model.ConfigureShardedModel(context));
    for (const at::Tensor& p : model.parameters()) {
      EXPECT_EQ(p.numel(), 0);
      EXPECT_TRUE(lightning::IsDeferred(p));
    }
    const at::Tensor ids = at::zeros({2, 8}, at::kLong);
    absl::StatusOr<at::Tensor> step = model.TrainingStep({ids, ids}, lightning::StepContext{});
    EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(step.status().message().find("\"tok.weight\" [256, 6] is deferred"), std::string::npos)
        << step.status();
    try {
      model.TokenLosses(ids, ids);
      ADD_FAILURE() << "TokenLosses ran on a deferred model";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("\"tok.weight\""), std::string::npos) << e.what();
    }
    SL_RETURN_IF_ERROR(lightning::MaterializeDeferred(model));
    EXPECT_TRUE(lightning::CheckMaterialized(model).ok());
    SL_ASSIGN_OR_RETURN(at::Tensor loss, model.TrainingStep({ids, ids}, lightning::StepContext{}));
    EXPECT_TRUE(loss.isfinite().item<bool>());
    return 0;
  });
  ASSERT_TRUE(results.ok()) << results.status();
}

}  // namespace
}  // namespace shardlight::simulate
