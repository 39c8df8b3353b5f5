// FsdpOptions' mixed-precision policy (param_dtype, reduce_dtype) under the
// Trainer on the simulated cluster: a policy of the parameters' own dtype is
// bit for bit no policy; bfloat16 gathers bfloat16 (what the all-gather
// moves, what the units hold) while the master shards and their gradients
// stay float32; a W=1 run is a hand computation of the same casts, exactly;
// bad policies fail every rank before training. World sizes 1-4 with a batch
// of 10 rows and a model whose dim-0 chunks are uneven and empty
// (fsdp_test_model.h), whole-model and per-unit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lightning/autocast_compat.h"
#include "lightning/strategies/fsdp_precision.h"
#include "lightning/strategies/fsdp_strategy.h"
#include "lightning/strategies/fsdp_test_model.h"
#include "lightning/trainer.h"
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
constexpr int64_t kSteps = 4;
const std::vector<std::string> kUnits = {"blocks.0", "blocks.1"};

struct Gathered {
  std::string unit;
  c10::ScalarType dtype;
  int64_t bytes;
};

struct Outcome {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> full;        // every parameter, gathered after the Fit
  std::map<std::string, c10::ScalarType> local;  // each sharded parameter's local shard dtype
  std::vector<Gathered> gathers;                 // this rank's all-gathers, in order
  std::vector<std::pair<std::string, int64_t>> unit_bytes;  // per-unit: on_unit_forward
};

FsdpOptions Policy(bool per_unit, std::optional<c10::ScalarType> param, std::optional<c10::ScalarType> reduce) {
  FsdpOptions o;
  o.units = kUnits;
  o.per_unit = per_unit;
  o.param_dtype = param;
  o.reduce_dtype = reduce;
  return o;
}

absl::StatusOr<Outcome> Train(RankContext& ctx, FsdpOptions fsdp, int64_t steps = kSteps,
                              const std::string& precision = "32-true") {
  Outcome run;
  fsdp.on_all_gather = [&run](const std::string& unit, c10::ScalarType dtype, int64_t bytes) {
    run.gathers.push_back({unit, dtype, bytes});
  };
  fsdp.on_unit_forward = [&run](const std::string& unit, int64_t bytes) { run.unit_bytes.emplace_back(unit, bytes); };
  Mlp module;
  TrainerOptions options;
  options.max_steps = steps;
  options.seed = kSeed;
  options.precision = precision;
  options.strategy = std::make_shared<FsdpStrategy>(std::move(fsdp));
  MlpData data(kBatch, kSeed);
  Trainer trainer(options);
  auto fit = trainer.Fit(module, data, ctx.pg);
  if (!fit.ok()) return fit.status();
  run.losses = fit->losses;
  for (const auto& [key, st] : module.sharded_parameters()) {
    run.local[key] = st.local_shards().front().tensor.scalar_type();
    auto full = st.FullTensor();
    if (!full.ok()) return full.status();
    run.full[key] = *full;
  }
  return run;
}

// The bytes one rank receives from a unit's all-gather of `dtype`: every
// rank's slot holds each parameter's largest dim-0 chunk (torch.chunk's
// ceil(rows / W)) and the failure flag.
int64_t GatherBytes(const std::vector<std::vector<int64_t>>& shapes, int w, int64_t element_size) {
  int64_t slot = 1;
  for (const auto& shape : shapes) {
    int64_t row = 1;
    for (size_t d = 1; d < shape.size(); ++d) row *= shape[d];
    slot += (shape[0] + w - 1) / w * row;
  }
  return slot * element_size * w;
}

TEST(FsdpPrecisionTest, OwnDtypePolicyIsBitEqualToNoPolicy) {
  for (int w : {1, 2, 3, 4}) {
    for (bool per_unit : {false, true}) {
      SimulatedCluster cluster(w);
      auto none = cluster.Run([&](RankContext& ctx) { return Train(ctx, Policy(per_unit, {}, {})); });
      ASSERT_TRUE(none.ok()) << none.status();
      auto own = cluster.Run([&](RankContext& ctx) { return Train(ctx, Policy(per_unit, at::kFloat, at::kFloat)); });
      ASSERT_TRUE(own.ok()) << own.status();
      const std::string what = absl::StrCat("W=", w, per_unit ? " per-unit" : " whole-model");
      EXPECT_EQ((*own)[0].losses, (*none)[0].losses) << what;
      for (const auto& [key, value] : (*none)[0].full) EXPECT_TRUE(at::equal((*own)[0].full.at(key), value)) << what << " " << key;
      for (const Gathered& g : (*own)[0].gathers) EXPECT_EQ(g.dtype, at::kFloat) << what << " " << g.unit;
    }
  }
}

TEST(FsdpPrecisionTest, Bf16GathersBf16AndKeepsFp32Masters) {
  // Mlp (fsdp_test_model.h): blocks.0 Linear(6, 7), blocks.1 Linear(7, 3), head Linear(3, 1) in the root.
  const std::map<std::string, std::vector<std::vector<int64_t>>> shapes = {
      {"blocks.0", {{7, 6}, {7}}}, {"blocks.1", {{3, 7}, {3}}}, {"", {{1, 3}, {1}}}};
  for (int w : {1, 2, 3, 4}) {
    for (bool per_unit : {false, true}) {
      const std::string what = absl::StrCat("W=", w, per_unit ? " per-unit" : " whole-model");
      SimulatedCluster cluster(w);
      auto fp32 = cluster.Run([&](RankContext& ctx) { return Train(ctx, Policy(per_unit, {}, {})); });
      ASSERT_TRUE(fp32.ok()) << fp32.status();
      auto bf16 = cluster.Run([&](RankContext& ctx) { return Train(ctx, Policy(per_unit, at::kBFloat16, at::kFloat)); });
      ASSERT_TRUE(bf16.ok()) << what << ": " << bf16.status();
      for (int r = 0; r < w; ++r) {
        const Outcome& got = (*bf16)[r];
        // The all-gathers move bfloat16: half the bytes of the float32 run's, unit by unit.
        ASSERT_EQ(got.gathers.size(), (*fp32)[r].gathers.size()) << what;
        ASSERT_FALSE(got.gathers.empty()) << what;
        for (size_t i = 0; i < got.gathers.size(); ++i) {
          const Gathered& g = got.gathers[i];
          EXPECT_EQ(g.dtype, at::kBFloat16) << what << " " << g.unit;
          EXPECT_EQ(g.bytes, GatherBytes(shapes.at(g.unit), w, 2)) << what << " " << g.unit;
          EXPECT_EQ(2 * g.bytes, (*fp32)[r].gathers[i].bytes) << what << " " << g.unit;
        }
        // The units' full parameters are bfloat16 (half the float32 run's bytes).
        ASSERT_EQ(got.unit_bytes.size(), (*fp32)[r].unit_bytes.size()) << what;
        for (size_t i = 0; i < got.unit_bytes.size(); ++i) {
          EXPECT_EQ(2 * got.unit_bytes[i].second, (*fp32)[r].unit_bytes[i].second) << what << " " << got.unit_bytes[i].first;
        }
        // The master shards the optimizer stepped stay float32.
        ASSERT_EQ(got.local.size(), 6u) << what;
        for (const auto& [key, dtype] : got.local) EXPECT_EQ(dtype, at::kFloat) << what << " " << key;
        for (const auto& [key, value] : got.full) EXPECT_EQ(value.scalar_type(), at::kFloat) << what << " " << key;
      }
      // It learns what float32 learns, to bf16's precision: each loss within
      // 5% (8-bit mantissas: ~0.4% per rounding, a few roundings deep, over
      // 4 steps), while a wrong chunk or a lost cast is off by far more or
      // not at all.
      const std::vector<double>& want = (*fp32)[0].losses;
      const std::vector<double>& got = (*bf16)[0].losses;
      ASSERT_EQ(got.size(), want.size());
      bool differs = false;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], want[i], 0.05 * want[i]) << what << " step " << i + 1;
        differs = differs || got[i] != want[i];
      }
      EXPECT_TRUE(differs) << what << ": bf16 compute gave float32's losses exactly";
    }
  }
}

// W=1 by hand: the parameters cast to bfloat16, Mlp's forward in bfloat16
// (the input cast to it), the gradients cast to float32 (the reduce dtype; one
// rank: no sum) and stepped by Sgd on the float32 masters (MlpOptions'
// momentum and weight decay, as lightning::Sgd computes them).
TEST(FsdpPrecisionTest, OneRankEqualsHandComputation) {
  const MlpOptions o;
  Mlp initial(o);
  ShardedContext context;
  context.seed = kSeed;  // Mlp's values depend on the seed only
  ASSERT_TRUE(initial.ConfigureShardedModel(context).ok());
  std::map<std::string, at::Tensor> master, momentum;
  for (const auto& item : initial.named_parameters()) master[item.key()] = item.value().detach().clone();
  const MlpData data(kBatch, kSeed);
  std::vector<double> losses;
  for (int64_t step = 0; step < kSteps; ++step) {
    std::map<std::string, at::Tensor> p;
    for (const auto& [key, value] : master) p[key] = value.to(at::kBFloat16).requires_grad_(true);
    const Batch batch = data.GetBatch(step);
    at::Tensor h = at::tanh(at::linear(batch[0].to(at::kBFloat16), p["blocks.0.weight"], p["blocks.0.bias"]));
    h = at::tanh(at::linear(h, p["blocks.1.weight"], p["blocks.1.bias"]));
    const at::Tensor predicted = at::linear(h, p["head.weight"], p["head.bias"]).reshape({-1});
    const at::Tensor loss = (predicted - batch[1]).pow(2).sum() / kBatch;
    loss.backward();
    losses.push_back(loss.detach().to(at::kDouble).item<double>());
    at::NoGradGuard no_grad;
    for (auto& [key, param] : master) {
      const at::Tensor grad = p[key].grad().to(at::kFloat).add(param, o.weight_decay);
      if (step == 0) {
        momentum[key] = grad.clone();
      } else {
        momentum[key].mul_(o.momentum).add_(grad);
      }
      param.sub_(momentum[key], o.lr);
    }
  }
  for (bool per_unit : {false, true}) {
    SimulatedCluster cluster(1);
    auto run = cluster.Run([&](RankContext& ctx) { return Train(ctx, Policy(per_unit, at::kBFloat16, at::kFloat)); });
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ((*run)[0].losses, losses) << (per_unit ? "per-unit" : "whole-model");
    for (const auto& [key, value] : master) {
      EXPECT_TRUE(at::equal((*run)[0].full.at(key), value)) << key << (per_unit ? " per-unit" : " whole-model");
    }
  }
}

// Every rank's outcome of a Fit: "ok" or its error.
std::vector<std::string> Outcomes(int w, const FsdpOptions& fsdp, const std::string& precision = "32-true") {
  SimulatedCluster cluster(w);
  auto all = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::string> {
    auto run = Train(ctx, fsdp, 1, precision);
    return run.ok() ? std::string("ok") : run.status().ToString();
  });
  EXPECT_TRUE(all.ok()) << all.status();
  return all.ok() ? *all : std::vector<std::string>{};
}

void ExpectEveryRankFails(const std::vector<std::string>& outcomes, const std::vector<std::string>& words) {
  ASSERT_FALSE(outcomes.empty());
  for (size_t r = 0; r < outcomes.size(); ++r) {
    for (const std::string& word : words) EXPECT_NE(outcomes[r].find(word), std::string::npos) << "rank " << r << ": " << outcomes[r];
  }
}

TEST(FsdpPrecisionTest, NonFloatingDtypesFailEveryRank) {
  ExpectEveryRankFails(Outcomes(2, Policy(true, at::kInt, {})), {"INVALID_ARGUMENT", "param_dtype int32", "not a floating"});
  ExpectEveryRankFails(Outcomes(3, Policy(false, {}, at::kLong)), {"INVALID_ARGUMENT", "reduce_dtype int64", "not a floating"});
}

// Whether float16 computes here is the probe's to say, not a version's: the
// test asks the build directly (a matmul and its backward) and expects
// the Fit to agree -- refused on every rank naming the dtype, or trained.
TEST(FsdpPrecisionTest, ParamDtypeTheBuildCannotComputeInFailsEveryRank) {
  bool computes = true;
  try {
    at::Tensor a = at::ones({2, 2}, at::kHalf).requires_grad_(true);
    at::matmul(a, at::ones({2, 2}, at::kHalf)).sum().backward();
  } catch (const std::exception&) {
    computes = false;
  }
  const std::vector<std::string> outcomes = Outcomes(2, Policy(true, at::kHalf, at::kFloat));
  std::cout << "float16 matmul on this build: " << (computes ? "computes" : "refused") << "\n";
  if (computes) {
    for (const std::string& o : outcomes) EXPECT_EQ(o, "ok");
  } else {
    ExpectEveryRankFails(outcomes, {"INVALID_ARGUMENT", "param_dtype float16", "cannot compute in it"});
  }
}

// A reduce_dtype of bfloat16 needs collectives that sum bfloat16: the first
// step's probe decides; the build's own account (CollectivesCarryBf16,
// autocast_compat.h) is what it must agree with.
TEST(FsdpPrecisionTest, ReduceDtypeTheGroupCannotSumFailsEveryRank) {
  const std::vector<std::string> outcomes = Outcomes(2, Policy(false, at::kBFloat16, at::kBFloat16));
  if (CollectivesCarryBf16()) {
    for (const std::string& o : outcomes) EXPECT_EQ(o, "ok");
  } else {
    ExpectEveryRankFails(outcomes, {"INVALID_ARGUMENT", "reduce_dtype bfloat16", "cannot"});
  }
}

TEST(FsdpPrecisionTest, PrecisionThatContradictsThePolicyFailsEveryRank) {
  ExpectEveryRankFails(Outcomes(2, Policy(true, at::kFloat, {}), "bf16-true"),
                       {"INVALID_ARGUMENT", "param_dtype float32", "bf16-true"});
  ExpectEveryRankFails(Outcomes(2, Policy(true, at::kDouble, {}), "bf16-mixed"),
                       {"INVALID_ARGUMENT", "param_dtype float64", "bf16-mixed"});
  EXPECT_TRUE(CheckPolicyWithPrecision(at::kHalf, "32-true").ok());
  EXPECT_TRUE(CheckPolicyWithPrecision(std::nullopt, "bf16-true").ok());
  // Autocast over bfloat16 (or float32) parameters agrees: it trains.
  for (const std::string& o : Outcomes(2, Policy(true, at::kBFloat16, at::kFloat), "bf16-mixed")) EXPECT_EQ(o, "ok");
}

TEST(FsdpPrecisionTest, ParseFloatDtype) {
  EXPECT_EQ(*ParseFloatDtype("bf16", "--param_dtype"), at::kBFloat16);
  EXPECT_EQ(*ParseFloatDtype("bfloat16", "--param_dtype"), at::kBFloat16);
  EXPECT_EQ(*ParseFloatDtype("fp32", "--reduce_dtype"), at::kFloat);
  EXPECT_EQ(*ParseFloatDtype("torch.float64", "--reduce_dtype"), at::kDouble);
  const auto bad = ParseFloatDtype("int8", "--param_dtype");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--param_dtype: 'int8' is not a floating dtype"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace shardlight::lightning
