// FsdpStrategy under the Trainer, on the simulated cluster: the same losses
// as ddp, state that is 1/W per rank, checkpoints that resume on other world
// sizes and across strategies, one rank's failure failing every rank, and
// bad unit lists refused on every rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lightning/strategies/ddp_strategy.h"
#include "lightning/strategies/fsdp_strategy.h"
#include "lightning/strategies/fsdp_test_model.h"
#include "lightning/trainer.h"
#include "sharded/sharding_spec.h"
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
constexpr int64_t kBatch = 10;  // rows per rank: W=3 -> 4,4,2; W=4 -> 3,3,3,1
// fp32 losses of the same run under ddp and fsdp: the gradients are the same
// sums, added in another order by another collective (a ring allreduce of
// one flat buffer versus per-unit reduce-scatters), so each step's update may
// differ in the last bits (~1e-7 relative) and the difference compounds over
// the steps. These runs differ by at most 6e-8 relative (0 at W=1 and 2,
// 4.3e-8 at W=3, 5.9e-8 at W=4, printed by the first test): 1e-5 leaves a
// wide margin while a wrong gradient chunk (off by a whole rank's share)
// still fails by orders of magnitude.
constexpr double kLossTolerance = 1e-5;

std::shared_ptr<const Strategy> Fsdp(std::vector<std::string> units = {"blocks.0", "blocks.1"},
                                     bool reduce_scatter = true) {
  return std::make_shared<FsdpStrategy>(FsdpOptions{std::move(units), reduce_scatter});
}

std::string Dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/fsdp_", name);
  std::filesystem::remove_all(dir);
  return dir;
}

// What a run ends with: its losses, and the full state (rank 0's view).
struct Outcome {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> state;  // model and optimizer entries, full tensors
  int64_t param_bytes = 0;      // this rank's persistent parameter bytes
  int64_t optimizer_bytes = 0;  // this rank's optimizer state bytes
  std::map<std::string, int64_t> local_rows;  // each parameter's dim 0 on this rank
};

int64_t LocalBytes(const sharded::StateValue& v) {
  if (const auto* dense = std::get_if<at::Tensor>(&v)) return dense->numel() * dense->element_size();
  int64_t n = 0;
  for (const auto& s : std::get<sharded::ShardedTensor>(v).local_shards()) n += s.tensor.numel() * s.tensor.element_size();
  return n;
}

absl::StatusOr<Outcome> Train(RankContext& ctx, std::shared_ptr<const Strategy> strategy, int64_t max_steps,
                              const std::string& dir = "", MlpOptions model = {}, double clip = 0,
                              int64_t accumulate = 1) {
  Mlp module(model);
  TrainerOptions options;
  options.gradient_clip_norm = clip;
  options.max_steps = max_steps;
  options.seed = kSeed;
  options.checkpoint_dir = dir;
  options.strategy = std::move(strategy);
  options.accumulate_grad_batches = accumulate;
  MlpData data(kBatch, kSeed, model.dtype);
  Trainer trainer(options);
  auto fit = trainer.Fit(module, data, ctx.pg);
  if (!fit.ok()) return fit.status();
  Outcome run;
  run.losses = fit->losses;
  // The state a checkpoint holds, as this rank holds it (a fresh optimizer
  // gives the layout; its values are the trained ones only for the model).
  auto dict = StateDictOf(module);
  if (!dict.ok()) return dict.status();
  for (const auto& [key, value] : dict->entries()) {
    run.param_bytes += LocalBytes(value);
    if (const auto* st = std::get_if<sharded::ShardedTensor>(&value)) {
      run.local_rows[key] = st->local_shards().front().tensor.size(0);
      auto full = st->FullTensor();
      if (!full.ok()) return full.status();
      run.state[key] = *full;
    } else {
      const at::Tensor& t = std::get<at::Tensor>(value);
      run.local_rows[key] = t.dim() > 0 ? t.size(0) : 1;
      run.state[key] = t.clone();
    }
  }
  auto made = module.ConfigureOptimizers();
  if (!made.ok()) return made.status();
  sharded::StateDict optimizer_state;
  if (absl::Status s = (*made)->AddStateTo(optimizer_state, "optimizer."); !s.ok()) return s;
  for (const auto& [key, value] : optimizer_state.entries()) run.optimizer_bytes += LocalBytes(value);
  return run;
}

void ExpectLossesNear(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], kLossTolerance * std::abs(want[i])) << what << ", step " << i;
  }
}

TEST(FsdpStrategyTest, LossesEqualDdpAtEveryWorldSize) {
  for (int w : {1, 2, 3, 4}) {
    SimulatedCluster cluster(w);
    auto ddp = cluster.Run([&](RankContext& ctx) { return Train(ctx, nullptr, 6); });
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    auto fsdp = cluster.Run([&](RankContext& ctx) { return Train(ctx, Fsdp(), 6); });
    ASSERT_TRUE(fsdp.ok()) << fsdp.status();
    auto root_only = cluster.Run([&](RankContext& ctx) { return Train(ctx, Fsdp({}, false), 6); });
    ASSERT_TRUE(root_only.ok()) << root_only.status();
    const Outcome& d = (*ddp)[0];
    EXPECT_LT(d.losses.back(), d.losses.front()) << "the model should learn something";
    for (const auto* other : {&(*fsdp)[0], &(*root_only)[0]}) {
      ExpectLossesNear(other->losses, d.losses, absl::StrCat("W=", w));
      for (const auto& [key, value] : d.state) {
        EXPECT_TRUE(at::allclose(other->state.at(key), value, 1e-5, 1e-6)) << "W=" << w << " " << key;
      }
    }
    double worst = 0;
    for (size_t i = 0; i < d.losses.size(); ++i) {
      worst = std::max(worst, std::abs((*fsdp)[0].losses[i] - d.losses[i]) / std::abs(d.losses[i]));
    }
    std::cout << "W=" << w << ": fsdp vs ddp losses, largest relative difference " << worst << "\n";
  }
}

TEST(FsdpStrategyTest, EachRankKeepsOnlyItsChunkOfParametersAndOptimizerState) {
  MlpOptions wide;
  wide.hidden = 64;
  for (int w : {2, 3, 4}) {
    SimulatedCluster cluster(w);
    auto ddp = cluster.Run([&](RankContext& ctx) { return Train(ctx, nullptr, 1, "", wide); });
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    auto fsdp = cluster.Run([&](RankContext& ctx) { return Train(ctx, Fsdp(), 1, "", wide); });
    ASSERT_TRUE(fsdp.ok()) << fsdp.status();
    const Outcome& d = (*ddp)[0];
    int64_t sum_params = 0, sum_optimizer = 0;
    for (int r = 0; r < w; ++r) {
      const Outcome& f = (*fsdp)[r];
      for (const auto& [key, full] : d.state) {
        EXPECT_EQ(f.local_rows.at(key), sharded::ChunkRanges(full.size(0), w)[r].second) << "W=" << w << " " << key;
      }
      sum_params += f.param_bytes;
      sum_optimizer += f.optimizer_bytes;
      std::cout << "W=" << w << " rank " << r << ": parameters + optimizer state " << f.param_bytes << " + "
                << f.optimizer_bytes << " bytes (fsdp) vs " << d.param_bytes << " + " << d.optimizer_bytes
                << " (ddp)\n";
    }
    // Nothing is held twice: the ranks' shards add up to one copy (the
    // optimizer's step counter, 8 bytes, is on every rank).
    EXPECT_EQ(sum_params, d.param_bytes) << "W=" << w;
    EXPECT_EQ(sum_optimizer - 8 * w, d.optimizer_bytes - 8) << "W=" << w;
    EXPECT_LT((*fsdp)[0].param_bytes, d.param_bytes * 6 / (5 * w)) << "W=" << w << ": ~1/W";
  }
}

TEST(FsdpStrategyTest, CheckpointSavedAtFourRanksResumesAtThreeAndTwo) {
  const std::string dir = Dir("w4");
  SimulatedCluster four(4);
  auto straight = four.Run([&](RankContext& ctx) { return Train(ctx, Fsdp(), 6); });
  ASSERT_TRUE(straight.ok()) << straight.status();
  auto saved = four.Run([&](RankContext& ctx) { return Train(ctx, Fsdp(), 3, dir); });
  ASSERT_TRUE(saved.ok()) << saved.status();
  for (int w : {3, 2}) {
    const std::string copy = Dir(absl::StrCat("w4_to_", w));
    std::filesystem::copy(dir, copy, std::filesystem::copy_options::recursive);
    SimulatedCluster cluster(w);
    auto loaded = cluster.Run([&](RankContext& ctx) { return Train(ctx, Fsdp(), 3, copy); });
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    for (const auto& [key, value] : (*saved)[0].state) {
      EXPECT_TRUE(at::equal((*loaded)[0].state.at(key), value)) << "W=" << w << " " << key;
    }
    auto resumed = cluster.Run([&](RankContext& ctx) { return Train(ctx, Fsdp({"blocks.1"}), 6, copy); });
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    ExpectLossesNear((*resumed)[0].losses, {(*straight)[0].losses.begin() + 3, (*straight)[0].losses.end()},
                     absl::StrCat("resumed at W=", w));
  }
}

TEST(FsdpStrategyTest, DdpAndFsdpCheckpointsResumeUnderEachOther) {
  SimulatedCluster two(2), three(3), four(4);
  auto straight = two.Run([&](RankContext& ctx) { return Train(ctx, nullptr, 6); });
  ASSERT_TRUE(straight.ok()) << straight.status();
  const std::vector<double> tail((*straight)[0].losses.begin() + 3, (*straight)[0].losses.end());
  const std::string from_ddp = Dir("from_ddp");
  ASSERT_TRUE(two.Run([&](RankContext& ctx) { return Train(ctx, nullptr, 3, from_ddp); }).ok());
  auto under_fsdp = three.Run([&](RankContext& ctx) { return Train(ctx, Fsdp(), 6, from_ddp); });
  ASSERT_TRUE(under_fsdp.ok()) << under_fsdp.status();
  ExpectLossesNear((*under_fsdp)[0].losses, tail, "ddp W=2 -> fsdp W=3");
  const std::string from_fsdp = Dir("from_fsdp");
  ASSERT_TRUE(four.Run([&](RankContext& ctx) { return Train(ctx, Fsdp(), 3, from_fsdp); }).ok());
  auto under_ddp = two.Run([&](RankContext& ctx) { return Train(ctx, nullptr, 6, from_fsdp); });
  ASSERT_TRUE(under_ddp.ok()) << under_ddp.status();
  ExpectLossesNear((*under_ddp)[0].losses, tail, "fsdp W=4 -> ddp W=2");
}

TEST(FsdpStrategyTest, OneRanksFailingStepFailsEveryRankWithItsError) {
  for (bool reduce_scatter : {true, false}) {
    SimulatedCluster cluster(3);
    MlpOptions failing;
    failing.fail_rank = 1;
    failing.fail_step = 2;
    auto errors = cluster.Run([&](RankContext& ctx) -> std::string {
      auto run = Train(ctx, Fsdp({"blocks.0"}, reduce_scatter), 5, "", failing);
      return run.ok() ? "ok" : run.status().ToString();
    });
    ASSERT_TRUE(errors.ok()) << errors.status();
    for (const std::string& e : *errors) EXPECT_EQ(e, "DATA_LOSS: training step 2 failed on rank 1: bad batch on rank 1");
  }
}

TEST(FsdpStrategyTest, BadUnitListsFailOnEveryRankBeforeAnyCollective) {
  struct Case {
    std::vector<std::string> units;
    bool tie;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{"blocks.0", "blocks.7"}, false, "fsdp unit \"blocks.7\" names no submodule of Mlp"},
      {{""}, false, "fsdp unit \"\" names no submodule of Mlp"},
      {{"head", "blocks.0", "head"}, false, "fsdp unit \"head\" is named twice"},
      {{"blocks.1"}, true,
       "fsdp: parameter \"blocks.1.weight\" (unit blocks.1) and \"head.tied\" (unit the root) are one tensor: a "
       "parameter in two units"},
      {{}, true, "fsdp: parameters \"blocks.1.weight\" and \"head.tied\" are one tensor"},
  };
  SimulatedCluster cluster(3);
  for (const Case& c : cases) {
    MlpOptions model;
    model.tie = c.tie;
    auto errors = cluster.Run([&](RankContext& ctx) -> std::string {
      auto run = Train(ctx, Fsdp(c.units), 2, "", model);
      return run.ok() ? "ok" : run.status().ToString();
    });
    ASSERT_TRUE(errors.ok()) << errors.status();
    for (const std::string& e : *errors) {
      EXPECT_THAT(e, ::testing::StartsWith("INVALID_ARGUMENT: configure failed on rank 0: " + c.error)) << e;
    }
  }
}

// The norm is over the whole model: fsdp's shards add up to ddp's full
// gradients, so the clipped runs match; a norm this small clips every step.
TEST(FsdpStrategyTest, ClippingToAGlobalNormMatchesDdp) {
  for (int w : {1, 3, 4}) {
    SimulatedCluster cluster(w);
    auto unclipped = cluster.Run([&](RankContext& ctx) { return Train(ctx, nullptr, 5); });
    ASSERT_TRUE(unclipped.ok()) << unclipped.status();
    auto ddp = cluster.Run([&](RankContext& ctx) { return Train(ctx, nullptr, 5, "", {}, 0.05); });
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    auto fsdp = cluster.Run([&](RankContext& ctx) { return Train(ctx, Fsdp(), 5, "", {}, 0.05); });
    ASSERT_TRUE(fsdp.ok()) << fsdp.status();
    ExpectLossesNear((*fsdp)[0].losses, (*ddp)[0].losses, absl::StrCat("clipped, W=", w));
    EXPECT_GT(std::abs((*ddp)[0].losses.back() - (*unclipped)[0].losses.back()), 1e-3) << "clipping should bite";
  }
}

TEST(FsdpStrategyTest, ASecondFitKeepsTheShardsAndDdpRefusesThem) {
  SimulatedCluster cluster(3);
  auto twice = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::string> {
    Mlp module;
    MlpData data(kBatch, kSeed);
    TrainerOptions options;
    options.seed = kSeed;
    options.max_steps = 2;
    options.strategy = Fsdp();
    auto first = Trainer(options).Fit(module, data, ctx.pg);
    if (!first.ok()) return first.status();
    auto second = Trainer(options).Fit(module, data, ctx.pg);  // a fresh optimizer, from the kept shards
    if (!second.ok()) return second.status();
    if (second->losses.size() != 2 || !(second->losses[0] < first->losses[0])) {
      return absl::InternalError("the second Fit should continue from the first's parameters");
    }
    options.strategy = nullptr;
    auto ddp = Trainer(options).Fit(module, data, ctx.pg);
    return ddp.ok() ? std::string("ok") : ddp.status().ToString();
  });
  ASSERT_TRUE(twice.ok()) << twice.status();
  for (const std::string& e : *twice) {
    EXPECT_THAT(e, ::testing::HasSubstr("configure failed on rank 0: Mlp's parameters are held sharded"));
  }
}

// Per-unit gathering (FsdpOptions::per_unit, RunFsdpUnit in the model's
// forward) computes what gathering the whole model computes: the same
// collectives' sums, so the same losses and parameters, at every world size
// (W=4: blocks.1 and head have empty shards), with and without resharding
// after forward and prefetch, and with micro-batches accumulated.
std::shared_ptr<const Strategy> PerUnit(bool reshard, bool prefetch,
                                        std::function<void(const std::string&, int64_t)> observe = nullptr) {
  FsdpOptions options{{"blocks.0", "blocks.1"}};
  options.per_unit = true;
  options.reshard_after_forward = reshard;
  options.prefetch = prefetch;
  options.on_unit_forward = std::move(observe);
  return std::make_shared<FsdpStrategy>(options);
}

double LargestRelative(const std::vector<double>& got, const std::vector<double>& want) {
  double worst = got.size() == want.size() ? 0 : 1e300;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::abs(want[i]));
  }
  return worst;
}

TEST(FsdpStrategyTest, PerUnitGatheringEqualsWholeModelAndDdp) {
  for (c10::ScalarType dtype : {at::kDouble, at::kFloat}) {
    // fp64: bit-equal to whole-model fsdp, ddp within 1e-12; fp32: 1e-6.
    const double tolerance = dtype == at::kDouble ? 1e-12 : 1e-6;
    MlpOptions model;
    model.dtype = dtype;
    for (int w : {1, 2, 3, 4}) {
      for (int64_t accumulate : {1, 2}) {
        SimulatedCluster cluster(w);
        auto ddp = cluster.Run([&](RankContext& ctx) { return Train(ctx, nullptr, 4, "", model, 0, accumulate); });
        ASSERT_TRUE(ddp.ok()) << ddp.status();
        auto whole = cluster.Run([&](RankContext& ctx) { return Train(ctx, Fsdp(), 4, "", model, 0, accumulate); });
        ASSERT_TRUE(whole.ok()) << whole.status();
        for (bool reshard : {true, false}) {
          for (bool prefetch : {true, false}) {
            const std::string what = absl::StrCat(c10::toString(dtype), " W=", w, " accumulate ", accumulate,
                                                  " reshard ", reshard, " prefetch ", prefetch);
            auto unit = cluster.Run(
                [&](RankContext& ctx) { return Train(ctx, PerUnit(reshard, prefetch), 4, "", model, 0, accumulate); });
            ASSERT_TRUE(unit.ok()) << what << ": " << unit.status();
            const Outcome& u = (*unit)[0];
            // One reduce-scatter per micro-batch (per-unit) against one of
            // the accumulated gradients (whole model): equal sums, rounded
            // in another order.
            if (accumulate == 1) {
              EXPECT_EQ(u.losses, (*whole)[0].losses) << what;
            } else {
              EXPECT_LE(LargestRelative(u.losses, (*whole)[0].losses), tolerance) << what;
            }
            EXPECT_LE(LargestRelative(u.losses, (*ddp)[0].losses), tolerance) << what;
            for (const auto& [key, value] : (*whole)[0].state) {
              EXPECT_TRUE(accumulate == 1 ? at::equal(u.state.at(key), value)
                                          : at::allclose(u.state.at(key), value, tolerance, tolerance))
                  << what << " " << key;
              EXPECT_TRUE(at::allclose(u.state.at(key), (*ddp)[0].state.at(key), tolerance, tolerance)) << what << " " << key;
            }
          }
        }
      }
    }
  }
}

// The buffer pool (FsdpOptions::buffer_pool, on by default) only changes
// where the transient buffers live: per-unit and whole-model fsdp compute
// bit-equal losses and parameters with it and without it, at world sizes with
// uneven and empty chunks, over steps that reuse its blocks.
TEST(FsdpStrategyTest, BufferPoolChangesNoValue) {
  MlpOptions model;
  model.dtype = at::kFloat;
  for (int w : {1, 3, 4}) {
    for (bool per_unit : {true, false}) {
      std::vector<Outcome> runs;
      for (bool pool : {true, false}) {
        FsdpOptions options{{"blocks.0", "blocks.1"}};
        options.per_unit = per_unit;
        options.buffer_pool = pool;
        auto strategy = std::make_shared<FsdpStrategy>(options);
        SimulatedCluster cluster(w);
        auto got = cluster.Run([&](RankContext& ctx) { return Train(ctx, strategy, 5, "", model, 0, 2); });
        ASSERT_TRUE(got.ok()) << "W=" << w << " pool " << pool << ": " << got.status();
        runs.push_back((*got)[0]);
      }
      const std::string what = absl::StrCat("W=", w, " per_unit ", per_unit);
      EXPECT_EQ(runs[0].losses, runs[1].losses) << what;
      for (const auto& [key, value] : runs[1].state) EXPECT_TRUE(at::equal(runs[0].state.at(key), value)) << what << " " << key;
    }
  }
}

// Inside the forward a rank holds the root (head) and the unit it computes
// -- not the whole model: at each unit's entry the full parameter storage
// alive is counted (FsdpOptions::on_unit_forward). Without resharding after
// forward the units gathered so far stay.
TEST(FsdpStrategyTest, PerUnitHoldsOneUnitUnshardedAtATimeInForward) {
  MlpOptions wide;
  wide.hidden = 64;
  const int64_t head = (3 + 1) * 4;
  const int64_t unit0 = (64 * 6 + 64) * 4;
  const int64_t unit1 = (3 * 64 + 3) * 4;
  for (int w : {1, 3, 4}) {
    for (bool reshard : {true, false}) {
      for (bool prefetch : {true, false}) {
        SimulatedCluster cluster(w);
        auto seen = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::vector<std::string>> {
          std::vector<std::string> entries;
          auto observe = [&](const std::string& unit, int64_t bytes) { entries.push_back(absl::StrCat(unit, ":", bytes)); };
          SL_RETURN_IF_ERROR(Train(ctx, PerUnit(reshard, prefetch, observe), 2, "", wide).status());
          return entries;
        });
        ASSERT_TRUE(seen.ok()) << seen.status();
        const std::string first = absl::StrCat("blocks.0:", head + unit0);
        const std::string second = absl::StrCat("blocks.1:", head + unit1 + (reshard ? 0 : unit0));
        for (const auto& entries : *seen) {
          EXPECT_EQ(entries, std::vector<std::string>({first, second, first, second}))
              << "W=" << w << " reshard " << reshard << " prefetch " << prefetch;
        }
      }
    }
  }
}

// FsdpOptions::on_unit_collective, the point fault tools kill a rank at
// (tools/train --die_in): every rank sees each named unit's all-gathers and
// reduce-scatters of each step, in the schedule's order (with prefetch the
// backward's next all-gather is issued before the reduce-scatter), with the
// step; the root's collectives are not reported.
TEST(FsdpStrategyTest, PerUnitCollectiveHookSeesEachUnitCollectiveInOrder) {
  for (int w : {1, 3}) {
    for (bool prefetch : {false, true}) {
      SimulatedCluster cluster(w);
      auto seen = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::vector<std::string>> {
        std::vector<std::string> calls;
        FsdpOptions options{{"blocks.0", "blocks.1"}};
        options.per_unit = true;
        options.prefetch = prefetch;
        options.on_unit_collective = [&calls](const std::string& collective, const std::string& unit, int64_t step) {
          calls.push_back(absl::StrCat(collective, " ", unit, " ", step));
        };
        SL_RETURN_IF_ERROR(Train(ctx, std::make_shared<FsdpStrategy>(options), 2).status());
        return calls;
      });
      ASSERT_TRUE(seen.ok()) << seen.status();
      std::vector<std::string> want;
      for (int step : {0, 1}) {
        const auto add = [&](const char* collective, const char* unit) {
          want.push_back(absl::StrCat(collective, " ", unit, " ", step));
        };
        add("all-gather", "blocks.0");
        add("all-gather", "blocks.1");
        add("all-gather", "blocks.1");  // the backward's
        if (prefetch) add("all-gather", "blocks.0");
        add("reduce-scatter", "blocks.1");
        if (!prefetch) add("all-gather", "blocks.0");
        add("reduce-scatter", "blocks.0");
      }
      for (const auto& calls : *seen) EXPECT_EQ(calls, want) << "W=" << w << " prefetch " << prefetch;
    }
  }
}

// A rank whose TrainingStep fails in the middle of the forward (after
// blocks.0) leaves no peer in blocks.1's all-gather: it joins the rest of the
// schedule with its failure flag, every rank stops at the same collective,
// and every rank returns the failing rank's error. Before any unit, too.
TEST(FsdpStrategyTest, PerUnitFailureMidForwardFailsEveryRankNamingIt) {
  for (int w : {2, 3, 4}) {
    for (bool after_first_unit : {true, false}) {
      for (bool prefetch : {true, false}) {
        MlpOptions failing;
        failing.fail_rank = w - 1;
        failing.fail_step = 2;
        failing.fail_after_first_unit = after_first_unit;
        SimulatedCluster cluster(w);
        auto errors = cluster.Run([&](RankContext& ctx) -> std::string {
          auto run = Train(ctx, PerUnit(true, prefetch), 5, "", failing);
          return run.ok() ? "ok" : run.status().ToString();
        });
        ASSERT_TRUE(errors.ok()) << errors.status();
        const std::string want = absl::StrCat("DATA_LOSS: training step 2 failed on rank ", w - 1, ": bad batch on rank ",
                                              w - 1, after_first_unit ? " after blocks.0" : "");
        for (const std::string& e : *errors) EXPECT_EQ(e, want) << "W=" << w << " prefetch " << prefetch;
      }
    }
  }
}

// A rank whose forward enters no unit while its peers enter them: its
// ReduceGradients meets their first unit at the micro-batch boundary, which
// fails the step on every rank, naming that rank and why.
TEST(FsdpStrategyTest, PerUnitRankThatEntersNoUnitFailsEveryRank) {
  for (int w : {2, 3}) {
    MlpOptions skipping;
    skipping.skip_units_rank = 1;
    SimulatedCluster cluster(w);
    auto errors = cluster.Run([&](RankContext& ctx) -> std::string {
      auto run = Train(ctx, PerUnit(true, true), 2, "", skipping);
      return run.ok() ? "ok" : run.status().ToString();
    });
    ASSERT_TRUE(errors.ok()) << errors.status();
    for (const std::string& e : *errors) {
      EXPECT_THAT(e, ::testing::StartsWith("FAILED_PRECONDITION: training step 0 failed on rank 1: fsdp: this rank's "
                                           "step entered no unit while other ranks entered them"))
          << "W=" << w;
    }
  }
}

// Validation runs the forward under no_grad inside the strategy's
// BeforeStep/ReduceGradients pair: per-unit fsdp gathers each unit only
// around its forward there too, and the values equal whole-model fsdp's.
TEST(FsdpStrategyTest, PerUnitValidationEqualsWholeModel) {
  for (int w : {1, 3, 4}) {
    SimulatedCluster cluster(w);
    auto validate = [&](std::shared_ptr<const Strategy> strategy) {
      return cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::vector<std::pair<int64_t, std::map<std::string, double>>>> {
        Mlp module;
        TrainerOptions options;
        options.max_steps = 4;
        options.seed = kSeed;
        options.val_check_interval = 2;
        options.limit_val_batches = 3;
        options.strategy = strategy;  // shared by the rank threads
        MlpData data(kBatch, kSeed), val(kBatch, kSeed + 1);
        auto fit = Trainer(options).Fit(module, data, val, ctx.pg);
        if (!fit.ok()) return fit.status();
        return fit->validations;
      });
    };
    auto whole = validate(Fsdp());
    ASSERT_TRUE(whole.ok()) << whole.status();
    ASSERT_EQ((*whole)[0].size(), 2u);
    for (bool reshard : {true, false}) {
      auto unit = validate(PerUnit(reshard, true));
      ASSERT_TRUE(unit.ok()) << unit.status();
      EXPECT_EQ((*unit)[0], (*whole)[0]) << "W=" << w << " reshard " << reshard;
    }
  }
}

}  // namespace
}  // namespace shardlight::lightning
