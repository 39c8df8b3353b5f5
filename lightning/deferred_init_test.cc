// Deferred parameters (deferred_init.h): no storage until materialised; a
// row range fills as the same rows of the whole; the variable keeps its
// identity; errors name the parameter; under fsdp each rank's initialiser
// runs only for its own dim-0 chunk and the Trainer fills the rest.
#include "lightning/deferred_init.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "lightning/lightning_module.h"
#include "lightning/strategies/ddp_strategy.h"
#include "lightning/strategies/fsdp_strategy.h"
#include "lightning/trainer.h"
#include "sharded/sharding_spec.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning {
namespace {

// Element i of a parameter of `sizes` (row-major, global index) is
// seed + i / 8: a function of the global index only.
RowInitializer IndexInit(std::vector<int64_t> sizes, double seed) {
  return [sizes, seed](at::Tensor& rows, int64_t first_row) -> absl::Status {
    int64_t row_numel = 1;
    for (size_t d = 1; d < sizes.size(); ++d) row_numel *= sizes[d];
    const int64_t start = first_row * row_numel;
    rows.copy_(at::arange(start, start + rows.numel(), at::kDouble).div(8).add(seed).view(rows.sizes()));
    return absl::OkStatus();
  };
}

at::Tensor Whole(const std::vector<int64_t>& sizes, double seed) {
  at::Tensor t = at::empty(sizes, at::kFloat);
  EXPECT_TRUE(IndexInit(sizes, seed)(t, 0).ok());
  return t;
}

TEST(DeferredInitTest, ADeferredParameterHoldsNoStorageUntilMaterialised) {
  torch::nn::Linear linear(5, 7);
  at::Tensor weight = linear->weight;  // the registered variable
  ASSERT_TRUE(DeferParameter(linear->weight, IndexInit({7, 5}, 1)).ok());
  ASSERT_TRUE(DeferParameter(linear->bias, IndexInit({7}, 2)).ok());
  EXPECT_TRUE(IsDeferred(linear->weight));
  EXPECT_EQ(linear->weight.numel(), 0);
  EXPECT_EQ(linear->weight.dim(), 2);  // the parameter's number of dims
  EXPECT_EQ(MaterializedSizes(linear->weight), (std::vector<int64_t>{7, 5}));
  EXPECT_TRUE(linear->weight.requires_grad());

  ASSERT_TRUE(MaterializeDeferred(*linear).ok());
  EXPECT_FALSE(IsDeferred(linear->weight));
  EXPECT_FALSE(IsDeferred(linear->bias));
  EXPECT_TRUE(at::equal(linear->weight, Whole({7, 5}, 1)));
  EXPECT_TRUE(at::equal(linear->bias, Whole({7}, 2)));
  // The same variable: the layer and anyone holding it see the values.
  EXPECT_EQ(weight.unsafeGetTensorImpl(), linear->weight.unsafeGetTensorImpl());
  EXPECT_TRUE(at::equal(weight, Whole({7, 5}, 1)));
  EXPECT_TRUE(linear->weight.requires_grad());
  EXPECT_TRUE(CheckMaterialized(*linear).ok());
  EXPECT_TRUE(MaterializeDeferred(*linear).ok());  // nothing left: a no-op
}

TEST(DeferredInitTest, RowRangesFillAsTheSameRowsOfTheWhole) {
  torch::nn::Module module;
  at::Tensor p = RegisterDeferredParameter(module, "w", {6, 3}, at::kFloat, IndexInit({6, 3}, 4));
  EXPECT_EQ(p.numel(), 0);
  const at::Tensor whole = Whole({6, 3}, 4);
  for (const auto& [first, count] : sharded::ChunkRanges(6, 4)) {  // 2, 2, 2, 0 rows
    at::Tensor rows = at::empty({count, 3}, at::kFloat);
    ASSERT_TRUE(FillDeferredRows(p, "w", first, rows).ok());
    EXPECT_TRUE(at::equal(rows, whole.narrow(0, first, count))) << first;
  }
  EXPECT_TRUE(IsDeferred(p));  // filling rows does not end the deferral
  at::Tensor mine = at::empty({2, 3}, at::kFloat);
  ASSERT_TRUE(FillDeferredRows(p, "w", 2, mine).ok());
  FinishDeferred(p, mine);
  EXPECT_FALSE(IsDeferred(p));
  EXPECT_TRUE(at::equal(*module.named_parameters().find("w"), whole.narrow(0, 2, 2)));
}

TEST(DeferredInitTest, MaterialisesInThePlaceholdersCurrentDtypeAndZeroDimParameters) {
  torch::nn::Module module;
  at::Tensor p = RegisterDeferredParameter(module, "w", {4, 2}, at::kFloat, IndexInit({4, 2}, 0.5));
  at::Tensor s = RegisterDeferredParameter(module, "scale", {}, at::kFloat, IndexInit({}, 3));
  p.set_data(p.to(at::kDouble));  // as a dtype conversion of the module does
  EXPECT_TRUE(IsDeferred(p));
  EXPECT_EQ(s.dim(), 0);
  ASSERT_TRUE(MaterializeDeferred(module).ok());
  EXPECT_EQ(p.scalar_type(), at::kDouble);
  EXPECT_TRUE(at::equal(p, Whole({4, 2}, 0.5).to(at::kDouble)));
  EXPECT_EQ(s.item<float>(), 3.0f);
}

TEST(DeferredInitTest, ErrorsNameTheParameter) {
  torch::nn::Module root("Root");
  auto child = root.register_module("child", std::make_shared<torch::nn::Module>());
  at::Tensor p = RegisterDeferredParameter(*child, "w", {4, 2}, at::kFloat, IndexInit({4, 2}, 0));
  absl::Status unmaterialised = CheckMaterialized(root);
  EXPECT_EQ(unmaterialised.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(unmaterialised.message().find("\"child.w\" [4, 2] is deferred"), std::string::npos) << unmaterialised;

  at::Tensor wrong_dtype = at::empty({2, 2}, at::kDouble);
  EXPECT_EQ(FillDeferredRows(p, "child.w", 0, wrong_dtype).code(), absl::StatusCode::kInvalidArgument);
  at::Tensor past_end = at::empty({2, 2}, at::kFloat);
  absl::Status past = FillDeferredRows(p, "child.w", 3, past_end);
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(past.message().find("cannot fill [2, 2] at row 3"), std::string::npos) << past;
  at::Tensor wide = at::empty({1, 3}, at::kFloat);
  EXPECT_EQ(FillDeferredRows(p, "child.w", 0, wide).code(), absl::StatusCode::kInvalidArgument);
  at::Tensor dense = at::zeros({2});
  EXPECT_EQ(FillDeferredRows(dense, "d", 0, dense).code(), absl::StatusCode::kFailedPrecondition);
  at::Tensor undefined;
  EXPECT_EQ(DeferParameter(undefined, IndexInit({1}, 0)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DeferParameter(dense, nullptr).code(), absl::StatusCode::kInvalidArgument);

  // An initialiser that fails, by status or by exception: named, with the rows.
  RegisterDeferredParameter(*child, "bad", {3}, at::kFloat,
                            [](at::Tensor&, int64_t) { return absl::DataLossError("no such seed"); });
  RegisterDeferredParameter(*child, "throws", {3}, at::kFloat, [](at::Tensor& rows, int64_t) -> absl::Status {
    rows.view({7, 7});  // throws: wrong shape
    return absl::OkStatus();
  });
  absl::Status bad = MaterializeDeferred(root);
  EXPECT_EQ(bad.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(bad.message(), "initialising deferred parameter \"child.bad\" rows [0, 3): no such seed");
  EXPECT_FALSE(IsDeferred(p));  // the parameters before it are materialised
  at::Tensor throws_rows = at::empty({3}, at::kFloat);
  absl::Status thrown = FillDeferredRows(*child->named_parameters().find("throws"), "child.throws", 0, throws_rows);
  EXPECT_EQ(thrown.code(), absl::StatusCode::kInternal);
  EXPECT_NE(thrown.message().find("initialising deferred parameter \"child.throws\" rows [0, 3): "), std::string::npos)
      << thrown;
}

// Two Linear units and a root Linear, deferred, whose initialisers record
// the rows they fill on this rank.
class DeferredStack : public LightningModule {
 public:
  // `fail`: u0.weight's initialiser fails (DataLoss) on the rows it is given.
  explicit DeferredStack(bool deferred, bool fail = false) : LightningModule("DeferredStack") {
    for (int u = 0; u < 2; ++u) units_.push_back(register_module("u" + std::to_string(u), torch::nn::Linear(4, 5 + u)));
    head_ = register_module("head", torch::nn::Linear(6, 1));
    uint64_t seed = 10;
    for (auto& item : named_parameters()) {
      const std::vector<int64_t> sizes = item.value().sizes().vec();
      RowInitializer init = IndexInit(sizes, static_cast<double>(++seed));
      if (fail && item.key() == "u0.weight") {
        init = [](at::Tensor&, int64_t) { return absl::DataLossError("the weights file is gone"); };
      }
      if (!deferred) {
        at::NoGradGuard no_grad;
        at::Tensor whole = at::empty(sizes, at::kFloat);
        EXPECT_TRUE(init(whole, 0).ok());
        item.value().copy_(whole);
        continue;
      }
      const std::string key = item.key();
      EXPECT_TRUE(DeferParameter(item.value(),
                                 [this, key, init](at::Tensor& rows, int64_t first) {
                                   std::lock_guard<std::mutex> lock(mu_);
                                   filled_[key].emplace_back(first, rows.dim() ? rows.size(0) : 1);
                                   return init(rows, first);
                                 })
                      .ok());
    }
  }
  absl::StatusOr<at::Tensor> TrainingStep(const Batch& batch, const StepContext& ctx) override {
    SL_RETURN_IF_ERROR(CheckMaterialized(*this));
    const auto [first, rows] = sharded::ChunkRanges(batch[0].size(0), ctx.world_size)[ctx.rank];
    at::Tensor x = batch[0].narrow(0, first, rows);
    at::Tensor h = at::cat({at::tanh(units_[0]->forward(x)).narrow(1, 0, 3), at::tanh(units_[1]->forward(x)).narrow(1, 0, 3)}, 1);
    return head_->forward(h).pow(2).sum() / batch[0].size(0);
  }
  absl::StatusOr<std::unique_ptr<Optimizer>> ConfigureOptimizers() override {
    auto sgd = Sgd::Create(TrainablesOf(*this), {0.1});
    if (!sgd.ok()) return sgd.status();
    return std::unique_ptr<Optimizer>(*std::move(sgd));
  }
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> filled() const { return filled_; }

 private:
  std::vector<torch::nn::Linear> units_;
  torch::nn::Linear head_{nullptr};
  std::mutex mu_;
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> filled_;
};

class Inputs : public DataSource {
 public:
  Batch GetBatch(int64_t step) const override {
    return {at::arange(12, at::kFloat).view({3, 4}).div(7).add(static_cast<double>(step)), at::zeros({3})};
  }
};

struct Fitted {
  std::vector<double> losses;
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> filled;
};

std::vector<Fitted> FitOn(int w, const std::string& strategy, bool deferred) {
  simulate::SimulatedCluster cluster(w);
  auto results = cluster.Run([&](simulate::RankContext& ctx) -> absl::StatusOr<Fitted> {
    DeferredStack module(deferred);
    TrainerOptions options;
    options.max_steps = 3;
    if (strategy == "fsdp") {
      FsdpOptions fsdp;
      fsdp.units = {"u0", "u1"};
      options.strategy = std::make_shared<FsdpStrategy>(fsdp);
    } else {
      options.strategy = std::make_shared<DdpStrategy>();
    }
    SL_ASSIGN_OR_RETURN(FitResult fit, Trainer(options).Fit(module, Inputs(), ctx.pg));
    return Fitted{fit.losses, module.filled()};
  });
  EXPECT_TRUE(results.ok()) << results.status();
  return results.ok() ? *results : std::vector<Fitted>{};
}

// Under fsdp each rank fills only its dim-0 chunk of every parameter
// (uneven and empty chunks at W = 3 and 4: dims 5, 6, 1); under ddp each
// fills every parameter whole; both train as the eager module.
TEST(DeferredInitTest, FsdpFillsOnlyEachRanksChunkAndTrainsAsEager) {
  for (const int w : {1, 2, 3, 4}) {
    for (const std::string strategy : {"fsdp", "ddp"}) {
      const std::vector<Fitted> eager = FitOn(w, strategy, false);
      const std::vector<Fitted> deferred = FitOn(w, strategy, true);
      ASSERT_EQ(eager.size(), static_cast<size_t>(w));
      ASSERT_EQ(deferred.size(), static_cast<size_t>(w));
      for (int r = 0; r < w; ++r) {
        EXPECT_EQ(deferred[r].losses, eager[r].losses) << strategy << " W=" << w << " rank " << r;
        const auto& filled = deferred[r].filled;
        ASSERT_EQ(filled.size(), 6u) << strategy << " W=" << w << " rank " << r;
        for (const auto& [key, calls] : filled) {
          const int64_t rows = key == "u0.weight" || key == "u0.bias"   ? 5
                               : key == "u1.weight" || key == "u1.bias" ? 6
                               : key == "head.weight"                   ? 1
                                                                        : 1;
          const std::pair<int64_t, int64_t> want =
              strategy == "fsdp" ? sharded::ChunkRanges(rows, w)[r] : std::pair<int64_t, int64_t>{0, rows};
          ASSERT_EQ(calls.size(), 1u) << key;
          EXPECT_EQ(calls[0], want) << strategy << " W=" << w << " rank " << r << " " << key;
        }
      }
    }
  }
}

// One rank's failing initialiser (in fsdp's Setup: it fills that rank's
// rows only) fails every rank's Fit with that rank's error, named, before
// any step.
TEST(DeferredInitTest, AFailingInitialiserOnOneRankFailsEveryRankNamed) {
  simulate::SimulatedCluster cluster(2);
  auto results = cluster.Run([&](simulate::RankContext& ctx) -> absl::StatusOr<absl::Status> {
    DeferredStack module(true, /*fail=*/ctx.rank == 1);
    TrainerOptions options;
    options.max_steps = 2;
    FsdpOptions fsdp;
    fsdp.units = {"u0", "u1"};
    options.strategy = std::make_shared<FsdpStrategy>(fsdp);
    return Trainer(options).Fit(module, Inputs(), ctx.pg).status();
  });
  ASSERT_TRUE(results.ok()) << results.status();
  for (int r = 0; r < 2; ++r) {
    const absl::Status& fit = (*results)[r];
    EXPECT_FALSE(fit.ok()) << "rank " << r;
    EXPECT_NE(fit.message().find("initialising deferred parameter \"u0.weight\" rows [3, 5): the weights file is gone"),
              std::string::npos)
        << "rank " << r << ": " << fit;
  }
}

}  // namespace
}  // namespace shardlight::lightning
