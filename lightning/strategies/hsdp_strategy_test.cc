// HSDP (FsdpStrategy::Hybrid) under the Trainer, on the simulated cluster:
// on (replicate, shard) meshes (1,4), (2,2), (4,1) and (2,3) -- uneven and
// empty shards on shard groups of 3 and 4 -- the same losses and parameters
// as fsdp and ddp at the same world size, whole-model and per-unit, with
// micro-batches and clipping; reduce_dtype applied to both sums; one rank's
// failure failing every rank with its error (every rank stops at the same
// collective: no hang); a bad mesh refused on every rank before any
// collective.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lightning/strategies/fsdp_strategy.h"
#include "lightning/strategies/fsdp_test_model.h"
#include "lightning/trainer.h"
#include "sharded/mesh/device_mesh.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;
using testing::Mlp;
using testing::MlpData;
using testing::MlpOptions;

constexpr uint64_t kSeed = 5;
constexpr int64_t kBatch = 10;

using Shape = std::vector<int64_t>;

// How a run lays the model out: ddp (no strategy), fsdp, or HSDP on `mesh`.
struct Layout {
  enum Kind { kDdp, kFsdp, kHsdp };
  Layout(Kind k, Shape m = {}, bool unit = false, std::optional<c10::ScalarType> reduce = std::nullopt)
      : kind(k), mesh(std::move(m)), per_unit(unit), reduce_dtype(reduce) {}
  Kind kind;
  Shape mesh;
  bool per_unit;
  std::optional<c10::ScalarType> reduce_dtype;
};

std::string Describe(const Layout& l) {
  const char* names[] = {"ddp", "fsdp", "hsdp"};
  return absl::StrCat(names[l.kind], l.kind == Layout::kHsdp ? absl::StrCat(" ", absl::StrJoin(l.mesh, "x")) : "",
                      l.per_unit ? " per-unit" : "");
}

sharded::mesh::MeshContext MeshContextOf(const RankContext& ctx) {
  sharded::mesh::MeshContext m;
  m.store = ctx.store;
  m.rank = ctx.rank;
  m.world_size = ctx.world_size;
  m.world = ctx.pg;
  return m;
}

// Collective for kHsdp (the mesh is made over the world).
absl::StatusOr<std::shared_ptr<const Strategy>> StrategyOf(RankContext& ctx, const Layout& l) {
  if (l.kind == Layout::kDdp) return std::shared_ptr<const Strategy>();
  FsdpOptions options;
  options.units = {"blocks.0", "blocks.1"};
  options.per_unit = l.per_unit;
  options.reduce_dtype = l.reduce_dtype;
  if (l.kind == Layout::kFsdp) return std::shared_ptr<const Strategy>(std::make_shared<FsdpStrategy>(options));
  SL_ASSIGN_OR_RETURN(sharded::mesh::MeshPtr mesh, sharded::mesh::DeviceMesh::Create(MeshContextOf(ctx), l.mesh, "hsdp"));
  return std::shared_ptr<const Strategy>(std::make_shared<FsdpStrategy>(FsdpStrategy::Hybrid(mesh, options)));
}

struct Outcome {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> state;  // the model's full tensors
  std::map<std::string, int64_t> local_rows;
};

struct RunOptions {
  int64_t steps = 4;
  MlpOptions model;
  double clip = 0;
  int64_t accumulate = 1;
  std::string dir;
};

absl::StatusOr<Outcome> Train(RankContext& ctx, const Layout& layout, const RunOptions& run) {
  SL_ASSIGN_OR_RETURN(std::shared_ptr<const Strategy> strategy, StrategyOf(ctx, layout));
  Mlp module(run.model);
  TrainerOptions options;
  options.gradient_clip_norm = run.clip;
  options.max_steps = run.steps;
  options.seed = kSeed;
  options.checkpoint_dir = run.dir;
  options.strategy = std::move(strategy);
  options.accumulate_grad_batches = run.accumulate;
  MlpData data(kBatch, kSeed, run.model.dtype);
  SL_ASSIGN_OR_RETURN(FitResult fit, Trainer(options).Fit(module, data, ctx.pg));
  Outcome out;
  out.losses = fit.losses;
  SL_ASSIGN_OR_RETURN(sharded::StateDict dict, StateDictOf(module));
  for (const auto& [key, value] : dict.entries()) {
    if (const auto* st = std::get_if<sharded::ShardedTensor>(&value)) {
      out.local_rows[key] = st->local_shards().front().tensor.size(0);
      SL_ASSIGN_OR_RETURN(out.state[key], st->FullTensor());
    } else {
      const at::Tensor& t = std::get<at::Tensor>(value);
      out.local_rows[key] = t.dim() > 0 ? t.size(0) : 1;
      out.state[key] = t.clone();
    }
  }
  return out;
}

std::vector<Outcome> Fit(int world, const Layout& layout, const RunOptions& run = {}) {
  simulate::ClusterOptions options;
  options.collective_timeout = std::chrono::seconds(20);
  SimulatedCluster cluster(world, options);
  auto got = cluster.Run([&](RankContext& ctx) { return Train(ctx, layout, run); });
  EXPECT_TRUE(got.ok()) << Describe(layout) << ": " << got.status();
  return got.ok() ? *got : std::vector<Outcome>(world);
}

double LargestRelative(const std::vector<double>& got, const std::vector<double>& want) {
  double worst = got.size() == want.size() && !got.empty() ? 0 : 1e300;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::abs(want[i]));
  }
  return worst;
}

double LargestStateDifference(const Outcome& got, const Outcome& want) {
  double worst = got.state.size() == want.state.size() && !got.state.empty() ? 0 : 1e300;
  for (const auto& [key, value] : want.state) {
    auto it = got.state.find(key);
    if (it == got.state.end()) return 1e300;
    worst = std::max(worst, (it->second - value).abs().max().item<double>());
  }
  return worst;
}

const std::vector<Shape> kMeshes = {{1, 4}, {2, 2}, {4, 1}, {2, 3}};

// fp64: HSDP's losses and parameters equal fsdp's and ddp's at the same
// world size within 1e-12 (the sums are the same, added in another order:
// the shard group's, then the replicate group's). Every rank of a shard
// group holds its torch.chunk of each parameter: on (2,3) the head's one row
// leaves two ranks empty; blocks.0's 7 rows split 3,3,1.
TEST(HsdpStrategyTest, LossesAndParametersEqualFsdpAndDdp) {
  MlpOptions model;
  model.dtype = at::kDouble;
  for (const Shape& mesh : kMeshes) {
    const int world = static_cast<int>(mesh[0] * mesh[1]);
    for (int64_t accumulate : {1, 2}) {
      RunOptions run;
      run.model = model;
      run.accumulate = accumulate;
      const std::vector<Outcome> ddp = Fit(world, {Layout::kDdp}, run);
      const std::vector<Outcome> fsdp = Fit(world, {Layout::kFsdp}, run);
      for (bool per_unit : {false, true}) {
        const Layout layout{Layout::kHsdp, mesh, per_unit};
        const std::string what = absl::StrCat(Describe(layout), " accumulate ", accumulate);
        const std::vector<Outcome> hsdp = Fit(world, layout, run);
        ASSERT_EQ(hsdp.size(), static_cast<size_t>(world));
        EXPECT_LT(hsdp[0].losses.back(), hsdp[0].losses.front()) << what << ": the model should learn";
        const double vs_ddp = LargestRelative(hsdp[0].losses, ddp[0].losses);
        const double vs_fsdp = LargestRelative(hsdp[0].losses, fsdp[0].losses);
        const double params_ddp = LargestStateDifference(hsdp[0], ddp[0]);
        const double params_fsdp = LargestStateDifference(hsdp[0], fsdp[0]);
        std::cout << what << ": losses vs ddp " << vs_ddp << ", vs fsdp " << vs_fsdp << " (relative); parameters vs ddp "
                  << params_ddp << ", vs fsdp " << params_fsdp << " (absolute)\n";
        EXPECT_LE(vs_ddp, 1e-12) << what;
        EXPECT_LE(vs_fsdp, 1e-12) << what;
        EXPECT_LE(params_ddp, 1e-12) << what;
        EXPECT_LE(params_fsdp, 1e-12) << what;
        for (int r = 0; r < world; ++r) {
          const int shard_rank = static_cast<int>(r % mesh[1]);
          for (const auto& [key, full] : ddp[0].state) {
            EXPECT_EQ(hsdp[r].local_rows.at(key), sharded::ChunkRanges(full.size(0), mesh[1])[shard_rank].second)
                << what << " rank " << r << " " << key;
          }
          // Every replica ends with the same parameters.
          EXPECT_EQ(LargestStateDifference(hsdp[r], hsdp[0]), 0) << what << " rank " << r;
        }
      }
    }
  }
}

// The norm is over the whole model, each shard counted once (not once per
// replica): HSDP's clipped run equals ddp's.
TEST(HsdpStrategyTest, ClippingToAGlobalNormMatchesDdp) {
  RunOptions clipped;
  clipped.model.dtype = at::kDouble;
  clipped.clip = 0.05;
  RunOptions unclipped = clipped;
  unclipped.clip = 0;
  for (const Shape& mesh : {Shape{2, 2}, Shape{2, 3}}) {
    const int world = static_cast<int>(mesh[0] * mesh[1]);
    const std::vector<Outcome> ddp = Fit(world, {Layout::kDdp}, clipped);
    const std::vector<Outcome> free = Fit(world, {Layout::kDdp}, unclipped);
    const std::vector<Outcome> hsdp = Fit(world, {Layout::kHsdp, mesh, true}, clipped);
    EXPECT_LE(LargestRelative(hsdp[0].losses, ddp[0].losses), 1e-12) << absl::StrJoin(mesh, "x");
    EXPECT_GT(std::abs(ddp[0].losses.back() - free[0].losses.back()), 1e-3) << "clipping should bite";
  }
}

// reduce_dtype: both sums (the shard group's reduce-scatter and the
// replicate allreduce) run in it. An fp64 model reducing in fp32 matches
// fsdp reducing in fp32 to fp32's rounding, and differs from the fp64
// reduction by more than fp64's.
TEST(HsdpStrategyTest, ReduceDtypeAppliesToBothSums) {
  RunOptions run;
  run.model.dtype = at::kDouble;
  for (bool per_unit : {false, true}) {
    const std::vector<Outcome> fsdp32 = Fit(4, {Layout::kFsdp, {}, per_unit, at::kFloat}, run);
    const std::vector<Outcome> hsdp32 = Fit(4, {Layout::kHsdp, {2, 2}, per_unit, at::kFloat}, run);
    const std::vector<Outcome> hsdp64 = Fit(4, {Layout::kHsdp, {2, 2}, per_unit}, run);
    const double vs_fsdp = LargestRelative(hsdp32[0].losses, fsdp32[0].losses);
    const double vs_fp64 = LargestRelative(hsdp32[0].losses, hsdp64[0].losses);
    std::cout << "reduce_dtype float32, per_unit " << per_unit << ": vs fsdp " << vs_fsdp << ", vs fp64 reduction "
              << vs_fp64 << "\n";
    EXPECT_LE(vs_fsdp, 1e-6);
    EXPECT_GT(vs_fp64, 1e-12) << "the fp32 reduction should round";
  }
}

// One rank's failing TrainingStep fails every rank with that rank's error:
// before any unit, or after blocks.0's forward (its shard group stops at
// blocks.1's all-gather; the other shard groups stop at the next replicate
// allreduce, which carries the flag), whole-model and per-unit.
TEST(HsdpStrategyTest, OneRanksFailureFailsEveryRankNamingIt) {
  for (const Shape& mesh : {Shape{2, 2}, Shape{2, 3}, Shape{4, 1}, Shape{3, 2}}) {
    const int world = static_cast<int>(mesh[0] * mesh[1]);
    for (int fail_rank : {0, world - 1}) {
      for (bool per_unit : {false, true}) {
        for (bool after_first_unit : {false, true}) {
          RunOptions run;
          run.steps = 4;
          run.model.fail_rank = fail_rank;
          run.model.fail_step = 2;
          run.model.fail_after_first_unit = after_first_unit;
          simulate::ClusterOptions options;
          options.collective_timeout = std::chrono::seconds(20);
          SimulatedCluster cluster(world, options);
          const Layout layout{Layout::kHsdp, mesh, per_unit};
          auto errors = cluster.Run([&](RankContext& ctx) -> std::string {
            auto got = Train(ctx, layout, run);
            return got.ok() ? "ok" : got.status().ToString();
          });
          ASSERT_TRUE(errors.ok()) << errors.status();
          const std::string want =
              absl::StrCat("DATA_LOSS: training step 2 failed on rank ", fail_rank, ": bad batch on rank ", fail_rank,
                           after_first_unit ? " after blocks.0" : "");
          for (const std::string& e : *errors) {
            EXPECT_EQ(e, want) << Describe(layout) << " after_first_unit " << after_first_unit;
          }
        }
      }
    }
  }
}

std::string Dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/hsdp_", name);
  std::filesystem::remove_all(dir);
  return dir;
}

// A checkpoint saved under HSDP (each replicated shard written once, by one
// replica) holds fsdp's keys and layout: it loads the same state under
// fsdp, ddp and HSDP on other meshes and world sizes, and the resumed runs
// continue the straight one's losses; its model and optimizer state reach
// every replica.
TEST(HsdpStrategyTest, CheckpointResumesUnderFsdpDdpAndOtherMeshes) {
  RunOptions six;
  six.model.dtype = at::kDouble;
  six.steps = 6;
  RunOptions three = six;
  three.steps = 3;
  three.dir = Dir("saved_2x2");
  const std::vector<Outcome> straight = Fit(4, {Layout::kHsdp, {2, 2}, true}, six);
  const std::vector<Outcome> saved = Fit(4, {Layout::kHsdp, {2, 2}, true}, three);
  ASSERT_FALSE(straight[0].losses.empty());
  const std::vector<double> tail(straight[0].losses.begin() + 3, straight[0].losses.end());
  struct Target {
    int world;
    Layout layout;
  };
  const std::vector<Target> targets = {{3, {Layout::kFsdp}},
                                       {2, {Layout::kDdp}},
                                       {6, {Layout::kHsdp, {2, 3}, true}},
                                       {4, {Layout::kHsdp, {4, 1}}},
                                       {4, {Layout::kHsdp, {2, 2}, true}}};
  int n = 0;
  for (const Target& t : targets) {
    const std::string what = absl::StrCat(Describe(t.layout), " W=", t.world);
    RunOptions load = three;
    load.dir = Dir(absl::StrCat("copy_", n));
    std::filesystem::copy(three.dir, load.dir, std::filesystem::copy_options::recursive);
    const std::vector<Outcome> loaded = Fit(t.world, t.layout, load);  // resumed at its last step: no step
    for (int r = 0; r < t.world; ++r) {
      EXPECT_EQ(LargestStateDifference(loaded[r], saved[0]), 0) << what << " rank " << r;
    }
    RunOptions resume = six;
    resume.dir = Dir(absl::StrCat("resume_", n++));
    std::filesystem::copy(three.dir, resume.dir, std::filesystem::copy_options::recursive);
    const std::vector<Outcome> resumed = Fit(t.world, t.layout, resume);
    const double worst = LargestRelative(resumed[0].losses, tail);
    std::cout << "resumed under " << what << ": losses vs the straight hsdp 2x2 run " << worst << " (relative)\n";
    // The optimizer state came back too: without it the next step's update differs by far more.
    EXPECT_LE(worst, 1e-12) << what;
  }
}

// A bad mesh is InvalidArgument on every rank, agreed with configure's
// verdict before any collective of the step.
TEST(HsdpStrategyTest, BadMeshesFailOnEveryRankBeforeAnyCollective) {
  struct Case {
    Shape mesh;  // empty: none
    std::string error;
  };
  const std::vector<Case> cases = {
      {{}, "hsdp needs a 2-d device mesh (replicate, shard); got none"},
      {{4}, "hsdp needs a 2-d device mesh (replicate, shard), not the 1-d mesh 4"},
      {{2, 1, 2}, "hsdp needs a 2-d device mesh (replicate, shard), not the 3-d mesh 2x1x2"},
  };
  for (const Case& c : cases) {
    SimulatedCluster cluster(4);
    auto errors = cluster.Run([&](RankContext& ctx) -> std::string {
      sharded::mesh::MeshPtr mesh;
      if (!c.mesh.empty()) {
        auto made = sharded::mesh::DeviceMesh::Create(MeshContextOf(ctx), c.mesh, "bad");
        if (!made.ok()) return made.status().ToString();
        mesh = *made;
      }
      Mlp module;
      MlpData data(kBatch, kSeed);
      TrainerOptions options;
      options.max_steps = 2;
      options.seed = kSeed;
      options.strategy = std::make_shared<FsdpStrategy>(FsdpStrategy::Hybrid(mesh));
      auto fit = Trainer(options).Fit(module, data, ctx.pg);
      return fit.ok() ? "ok" : fit.status().ToString();
    });
    ASSERT_TRUE(errors.ok()) << errors.status();
    for (const std::string& e : *errors) {
      EXPECT_THAT(e, ::testing::StartsWith("INVALID_ARGUMENT: configure failed on rank 0: " + c.error)) << e;
    }
  }
}

}  // namespace
}  // namespace shardlight::lightning
