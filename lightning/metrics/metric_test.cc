// Metrics on W = 1..16 thread-ranks with uneven data (one rank empty) equal
// the same quantity computed in one process over all the data; inconsistent
// updates fail every rank with the failing rank's error; state dicts carry
// metric states into a fresh module.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lightning/lightning_module.h"
#include "lightning/metrics/accuracy.h"
#include "lightning/metrics/cat_metric.h"
#include "lightning/metrics/confusion_matrix.h"
#include "lightning/metrics/mean_metric.h"
#include "lightning/metrics/mean_squared_error.h"
#include "lightning/state_dict_hooks.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning::metrics {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;

struct Data {
  at::Tensor scores, target, preds_f, target_f;
};

Data MakeData(int64_t n, int64_t classes, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  Data d;
  d.scores = at::randn({n, classes}, gen, at::kFloat);
  d.target = at::randint(classes, {n}, gen, at::kLong);
  d.preds_f = at::randn({n}, gen, at::kFloat);
  d.target_f = at::randn({n}, gen, at::kFloat);
  return d;
}

// Rank r's rows [begin, end): uneven (quadratic) and rank 1 empty when W > 1.
std::pair<int64_t, int64_t> Slice(int64_t n, int rank, int w) {
  auto b = [&](int r) { return n * r * r / (int64_t{w} * w); };
  if (w > 1 && rank == 1) return {b(2), b(2)};
  if (w > 1 && rank == 0) return {0, b(2)};
  return {b(rank), b(rank + 1)};
}

// All the metrics under test, as members of one module.
struct Metrics : LightningModule {
  explicit Metrics(int64_t classes) : LightningModule("Metrics") {
    mse = register_module("mse", std::make_shared<MeanSquaredError>());
    top1 = register_module("top1", *Accuracy::Create(classes, 1));
    top3 = register_module("top3", *Accuracy::Create(classes, 3));
    confmat = register_module("confmat", *ConfusionMatrix::Create(classes));
    mean = register_module("mean", std::make_shared<MeanMetric>());
    cat = register_module("cat", std::make_shared<CatMetric>());
  }
  absl::Status Update(const Data& d, int64_t begin, int64_t end) {
    auto part = [&](const at::Tensor& t) { return t.narrow(0, begin, end - begin); };
    SL_RETURN_IF_ERROR(mse->Update(part(d.preds_f), part(d.target_f)));
    SL_RETURN_IF_ERROR(top1->Update(part(d.scores), part(d.target)));
    SL_RETURN_IF_ERROR(top3->Update(part(d.scores), part(d.target)));
    SL_RETURN_IF_ERROR(confmat->Update(part(d.scores), part(d.target)));
    SL_RETURN_IF_ERROR(mean->Update(part(d.preds_f)));
    return cat->Update(part(d.target_f));
  }
  std::shared_ptr<MeanSquaredError> mse;
  std::shared_ptr<Accuracy> top1, top3;
  std::shared_ptr<ConfusionMatrix> confmat;
  std::shared_ptr<MeanMetric> mean;
  std::shared_ptr<CatMetric> cat;
};

struct Values {
  double mse = 0, top1 = 0, top3 = 0, mean = 0, confmat_accuracy = 0;
  at::Tensor confmat, cat;
};

absl::StatusOr<double> Scalar(absl::StatusOr<sharded::StateValue> x) {
  if (!x.ok()) return x.status();
  return std::get<at::Tensor>(*x).item<double>();
}

absl::StatusOr<Values> ComputeAll(Metrics& m) {
  Values v;
  SL_ASSIGN_OR_RETURN(v.mse, Scalar(m.mse->Compute()));
  SL_ASSIGN_OR_RETURN(v.top1, Scalar(m.top1->Compute()));
  SL_ASSIGN_OR_RETURN(v.top3, Scalar(m.top3->Compute()));
  SL_ASSIGN_OR_RETURN(v.mean, Scalar(m.mean->Compute()));
  SL_ASSIGN_OR_RETURN(v.confmat_accuracy, m.confmat->ComputeScalar());
  SL_ASSIGN_OR_RETURN(sharded::StateValue cm, m.confmat->Compute());
  SL_ASSIGN_OR_RETURN(v.confmat, std::get<sharded::ShardedTensor>(cm).FullTensor());
  SL_ASSIGN_OR_RETURN(sharded::StateValue cat, m.cat->Compute());
  v.cat = std::get<at::Tensor>(cat);
  return v;
}

// The same quantities in one process with plain ATen.
Values Reference(const Data& d, int64_t classes) {
  Values v;
  v.mse = (d.preds_f.to(at::kDouble) - d.target_f.to(at::kDouble)).pow(2).mean().item<double>();
  auto acc = [&](int64_t k) {
    return std::get<1>(d.scores.topk(k, 1)).eq(d.target.unsqueeze(1)).any(1).to(at::kDouble).mean().item<double>();
  };
  v.top1 = acc(1);
  v.top3 = acc(3);
  v.mean = d.preds_f.to(at::kDouble).mean().item<double>();
  v.confmat = at::zeros({classes, classes}, at::kLong);
  v.confmat.index_put_({d.target, d.scores.argmax(1)}, at::ones({d.target.size(0)}, at::kLong), true);
  v.confmat_accuracy = v.confmat.diagonal().sum().item<double>() / d.target.size(0);
  v.cat = d.target_f.to(at::kDouble);
  return v;
}

void ExpectMatches(const Values& got, const Values& want, const std::string& where) {
  EXPECT_NEAR(got.mse, want.mse, 1e-9 * std::max(1.0, want.mse)) << where;
  EXPECT_DOUBLE_EQ(got.top1, want.top1) << where;
  EXPECT_DOUBLE_EQ(got.top3, want.top3) << where;
  EXPECT_NEAR(got.mean, want.mean, 1e-9) << where;
  EXPECT_DOUBLE_EQ(got.confmat_accuracy, want.confmat_accuracy) << where;
  EXPECT_TRUE(at::equal(got.confmat, want.confmat)) << where;
  // Cat order is rank-major per sync; the multiset is what must match.
  EXPECT_TRUE(at::equal(std::get<0>(got.cat.sort()), std::get<0>(want.cat.sort()))) << where;
}

TEST(MetricTest, EveryWorldSizeEqualsOneProcessWithUnevenAndEmptyRanks) {
  constexpr int64_t kN = 211, kClasses = 7;
  const Data data = MakeData(kN, kClasses, 5);
  const Values want = Reference(data, kClasses);
  for (int w = 1; w <= 8; ++w) {
    SimulatedCluster cluster(w);
    auto got = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<Values> {
      Metrics m(kClasses);
      SL_RETURN_IF_ERROR(BindMetrics(m, ctx.pg));
      auto [begin, end] = Slice(kN, ctx.rank, w);
      // Two updates per rank, the first one possibly empty.
      const int64_t mid = begin + (end - begin) / 3;
      SL_RETURN_IF_ERROR(m.Update(data, begin, mid));
      SL_RETURN_IF_ERROR(m.Update(data, mid, end));
      return ComputeAll(m);
    });
    ASSERT_TRUE(got.ok()) << "W=" << w << ": " << got.status();
    for (int r = 0; r < w; ++r) ExpectMatches((*got)[r], want, absl::StrCat("W=", w, " rank ", r));
  }
}

TEST(MetricTest, ComputeTwiceAndUpdateAfterComputeKeepCounting) {
  constexpr int64_t kN = 60, kClasses = 4;
  const Data data = MakeData(kN, kClasses, 9);
  const Values want = Reference(data, kClasses);
  SimulatedCluster cluster(3);
  auto got = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<Values> {
    Metrics m(kClasses);
    SL_RETURN_IF_ERROR(BindMetrics(m, ctx.pg));
    auto [begin, end] = Slice(kN, ctx.rank, 3);
    const int64_t mid = (begin + end) / 2;
    SL_RETURN_IF_ERROR(m.Update(data, begin, mid));
    SL_RETURN_IF_ERROR(ComputeAll(m).status());
    SL_RETURN_IF_ERROR(ComputeAll(m).status());
    SL_RETURN_IF_ERROR(m.Update(data, mid, end));
    return ComputeAll(m);
  });
  ASSERT_TRUE(got.ok()) << got.status();
  for (int r = 0; r < 3; ++r) ExpectMatches((*got)[r], want, absl::StrCat("rank ", r));
}

TEST(MetricTest, NoDataAnywhereIsFailedPreconditionOnEveryRank) {
  SimulatedCluster cluster(3);
  auto got = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::string> {
    auto mean = std::make_shared<MeanMetric>();
    SL_RETURN_IF_ERROR(mean->Bind(ctx.pg));
    SL_RETURN_IF_ERROR(mean->Update(at::empty({0})));
    return mean->Compute().status().ToString();
  });
  ASSERT_TRUE(got.ok()) << got.status();
  for (const auto& s : *got) EXPECT_NE(s.find("FAILED_PRECONDITION"), std::string::npos) << s;
}

// 16 ranks, 3000 classes: each rank's rows of the sharded matrix equal the
// reference's, and each rank holds about 1/16 of the matrix.
TEST(MetricTest, SixteenRanksLargeConfusionMatrixIsShardedByRows) {
  constexpr int64_t kN = 20000, kClasses = 3000;
  constexpr int kW = 16;
  auto gen = at::detail::createCPUGenerator(3);
  const at::Tensor target = at::randint(kClasses, {kN}, gen, at::kLong);
  // 70% right, the rest random.
  const at::Tensor preds =
      at::where(at::rand({kN}, gen) < 0.7, target, at::randint(kClasses, {kN}, gen, at::kLong));
  at::Tensor want = at::zeros({kClasses, kClasses}, at::kLong);
  want.index_put_({target, preds}, at::ones({kN}, at::kLong), true);
  const double want_accuracy = want.diagonal().sum().item<double>() / kN;
  SimulatedCluster cluster(kW);
  auto got = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<int64_t> {
    SL_ASSIGN_OR_RETURN(auto cm, ConfusionMatrix::Create(kClasses));
    SL_RETURN_IF_ERROR(cm->Bind(ctx.pg));
    auto [begin, end] = Slice(kN, ctx.rank, kW);
    SL_RETURN_IF_ERROR(cm->Update(preds.narrow(0, begin, end - begin), target.narrow(0, begin, end - begin)));
    SL_ASSIGN_OR_RETURN(sharded::StateValue value, cm->Compute());
    const auto& matrix = std::get<sharded::ShardedTensor>(value);
    for (const auto& shard : matrix.local_shards()) {
      const at::Tensor expected = want.narrow(0, shard.metadata.offsets[0], shard.metadata.sizes[0]);
      if (!at::equal(shard.tensor, expected)) {
        return absl::InternalError(absl::StrCat("rank ", ctx.rank, " rows differ"));
      }
    }
    SL_ASSIGN_OR_RETURN(double accuracy, cm->ComputeScalar());
    if (accuracy != want_accuracy) return absl::InternalError("accuracy differs");
    return cm->StateBytes();
  });
  ASSERT_TRUE(got.ok()) << got.status();
  const int64_t full = kClasses * kClasses * 8;
  for (int r = 0; r < kW; ++r) {
    EXPECT_LE((*got)[r], full / kW + kClasses * 8) << "rank " << r;  // one chunk of rows
  }
}

// Runs `bad` on rank 1 only; every rank then computes and must see rank 1's error.
void ExpectEveryRankFails(const std::function<absl::Status(Metrics&)>& bad, const std::string& needle) {
  constexpr int64_t kClasses = 5;
  const Data data = MakeData(30, kClasses, 2);
  SimulatedCluster cluster(3);
  auto got = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::string> {
    Metrics m(kClasses);
    SL_RETURN_IF_ERROR(BindMetrics(m, ctx.pg));
    SL_RETURN_IF_ERROR(m.Update(data, ctx.rank * 10, ctx.rank * 10 + 10));
    if (ctx.rank == 1) {
      const absl::Status local = bad(m);
      if (local.ok()) return absl::InternalError("the bad update was accepted");
    }
    return ComputeAll(m).status().ToString();
  });
  ASSERT_TRUE(got.ok()) << got.status();
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE((*got)[r].find("rank 1: metric '"), std::string::npos) << "rank " << r << ": " << (*got)[r];
    EXPECT_NE((*got)[r].find(needle), std::string::npos) << "rank " << r << ": " << (*got)[r];
  }
}

TEST(MetricTest, ClassIdOutOfRangeFailsEveryRank) {
  ExpectEveryRankFails(
      [](Metrics& m) { return m.top1->Update(at::randn({2, 5}), at::tensor({int64_t{1}, int64_t{9}})); },
      "class id 9 outside [0, 5)");
}

TEST(MetricTest, WrongShapeFailsEveryRank) {
  ExpectEveryRankFails([](Metrics& m) { return m.mse->Update(at::randn({3}), at::randn({4})); },
                       "preds have shape [3] but target has [4]");
  ExpectEveryRankFails(
      [](Metrics& m) { return m.confmat->Update(at::randn({2, 6}), at::tensor({int64_t{1}, int64_t{2}})); },
      "scores must have shape [2, 5]");
}

TEST(MetricTest, DtypeMismatchFailsEveryRank) {
  ExpectEveryRankFails([](Metrics& m) { return m.mse->Update(at::randn({3}), at::randn({3}, at::kDouble)); },
                       "must share one floating dtype");
  ExpectEveryRankFails([](Metrics& m) { return m.top3->Update(at::randn({2, 5}), at::tensor({1, 2}, at::kInt)); },
                       "must be int64 class ids");
}

TEST(MetricTest, DifferentlyConfiguredRanksFailToBind) {
  SimulatedCluster cluster(2);
  auto got = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::string> {
    SL_ASSIGN_OR_RETURN(auto acc, Accuracy::Create(ctx.rank == 0 ? 5 : 6));
    return acc->Bind(ctx.pg).ToString();
  });
  ASSERT_TRUE(got.ok()) << got.status();
  for (const auto& s : *got) {
    EXPECT_NE(s.find("ranks disagree on the declaration of metric 'Accuracy'"), std::string::npos) << s;
  }
}

TEST(MetricTest, ResetClearsStateAndError) {
  SimulatedCluster cluster(2);
  auto got = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<double> {
    auto mse = std::make_shared<MeanSquaredError>();
    SL_RETURN_IF_ERROR(mse->Bind(ctx.pg));
    SL_RETURN_IF_ERROR(mse->Update(at::ones({2}), at::zeros({2})));
    (void)mse->Update(at::ones({2}), at::zeros({3}));  // poisons
    if (mse->Compute().ok()) return absl::InternalError("poisoned metric computed");
    mse->Reset();
    SL_RETURN_IF_ERROR(mse->Update(at::full({2}, 3.0), at::ones({2})));
    return Scalar(mse->Compute());
  });
  ASSERT_TRUE(got.ok()) << got.status();
  for (double v : *got) EXPECT_DOUBLE_EQ(v, 4.0);
}

// StateDictOf / LoadStateDict: metric states (dense, mean, cat, sharded)
// reach a fresh module, which computes the same values and keeps counting.
TEST(MetricTest, StateDictCarriesMetricsIntoAFreshModule) {
  constexpr int64_t kN = 90, kClasses = 6;
  const Data data = MakeData(kN, kClasses, 11);
  const Values want = Reference(data, kClasses);
  SimulatedCluster cluster(3);
  auto got = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<Values> {
    auto [begin, end] = Slice(kN, ctx.rank, 3);
    const int64_t mid = (begin + end) / 2;
    Metrics first(kClasses);
    SL_RETURN_IF_ERROR(BindMetrics(first, ctx.pg));
    SL_RETURN_IF_ERROR(first.Update(data, begin, mid));
    SL_ASSIGN_OR_RETURN(StateDict dict, StateDictOf(first));
    if (!dict.Contains("confmat.matrix") || !IsSharded(*dict.Find("confmat.matrix")) ||
        !dict.Contains("cat.values.rows") || !dict.Contains("mean.mean.weight") || !dict.Contains("top3.tp")) {
      return absl::InternalError("state dict lacks metric keys");
    }
    Metrics second(kClasses);
    SL_RETURN_IF_ERROR(BindMetrics(second, ctx.pg));
    SL_RETURN_IF_ERROR(second.Update(data, begin, mid));  // replaced by the load
    SL_RETURN_IF_ERROR(LoadStateDict(second, std::move(dict)).status());
    SL_RETURN_IF_ERROR(second.Update(data, mid, end));
    return ComputeAll(second);
  });
  ASSERT_TRUE(got.ok()) << got.status();
  for (int r = 0; r < 3; ++r) ExpectMatches((*got)[r], want, absl::StrCat("rank ", r));
}

}  // namespace
}  // namespace shardlight::lightning::metrics
