// FsdpTpStrategy under the Trainer, on the simulated cluster: the small
// tensor-parallel MLP (tp_test_model.h) in float64 trains to model_parallel's
// losses and reduced, clipped gradients on every DP x TP mesh (uneven and
// empty DP chunks and TP pieces included) while each rank keeps 1/W of it
// between steps; its checkpoint resumes under model_parallel and fsdp_tp on
// other meshes, and model_parallel's under fsdp_tp; a second Fit keeps the
// layout, members frozen since included (gathered, never reduce-scattered);
// model_parallel refuses members fsdp_tp holds chunked; a mesh named like the
// layout view is not taken for it; a validation reduce-scatters nothing; a
// DP group failing its step fails every rank naming it; bad meshes,
// dense parameters and unsupported options are refused on every rank before
// any collective.
#include "lightning/strategies/fsdp_tp_strategy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <tuple>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lightning/sharded_module.h"
#include "lightning/strategies/model_parallel_strategy.h"
#include "lightning/strategies/tp_test_model.h"
#include "lightning/trainer.h"
#include "sharded/mesh/device_mesh.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;
using tp_testing::kHidden;
using tp_testing::kIn;
using tp_testing::kOut;
using tp_testing::MeshContextOf;
using tp_testing::TinyData;
using tp_testing::TinyTp;
using ::testing::HasSubstr;

using StrategyFor = std::function<std::shared_ptr<Strategy>(sharded::mesh::MeshPtr)>;

const StrategyFor kModelParallel = [](sharded::mesh::MeshPtr mesh) {
  return std::make_shared<ModelParallelStrategy>(std::move(mesh));
};
const StrategyFor kFsdpTp = [](sharded::mesh::MeshPtr mesh) {
  return std::make_shared<FsdpTpStrategy>(std::move(mesh));
};

struct Job {
  std::vector<int64_t> shape;  // empty: no mesh
  StrategyFor strategy = kFsdpTp;
  int64_t steps = 4;
  std::string checkpoint_dir;  // saved at the end; resumed from when it holds one
  int fail_dp = -1;
  bool dense = false;
  bool second_fit = false;  // then Fit the same module again (a fresh Trainer, the same steps)
  int64_t accumulate = 1;   // TrainerOptions::accumulate_grad_batches
  bool validate = false;    // validation every 2 steps (1 batch)
  bool predict = false;     // then rank 0's prediction of TinyData's step-9 batch (fsdp_tp: on the gathered pieces)
  bool sgd = false;         // tp::MeshSgdOptimizer instead of the mesh AdamW
  std::string mesh_name = "t";      // DeviceMesh::Create's
  StrategyFor second_strategy;      // the second Fit's (null: `strategy`)
  std::function<void(TinyTp&)> between;  // run on every rank between the two Fits
  int fail_validation_from = -1;    // the ranks from this one on fail their ValidationStep
};

struct Outcome {
  std::vector<absl::StatusOr<FitResult>> ranks;
  std::vector<absl::StatusOr<FitResult>> second;  // each rank's second Fit
  at::Tensor fc_grad;             // rank 0's fc weight gradient after the last step (reduced, clipped)
  at::Tensor prediction;          // rank 0's after the last Fit, with Job::predict
  int64_t held_numel = 0;         // every rank's members' elements between steps, summed (after the first Fit)
  int64_t held_numel_last = 0;    // the same after the last Fit
  int fc_weight_grads = 0;        // the ranks whose fc.weight has a gradient after the last Fit
};

// TinyTp whose ValidationStep fails on the ranks from `fail_from` on ("val batch unreadable").
class ValidatedTp : public TinyTp {
 public:
  ValidatedTp(int fail_dp, bool dense, bool sgd, int fail_from)
      : TinyTp(fail_dp, 2, dense, at::kDouble, sgd), fail_from_(fail_from) {}
  absl::StatusOr<ValidationLog> ValidationStep(const Batch& batch, const StepContext& ctx) override {
    if (fail_from_ >= 0 && ctx.rank >= fail_from_) return absl::DataLossError("val batch unreadable");
    return TinyTp::ValidationStep(batch, ctx);
  }

 private:
  int fail_from_;
};

// The mesh member `key` of `model` (null when none).
sharded::mesh::MeshTensor* Member(TinyTp& model, const std::string& key) {
  for (const auto& [k, m] : MeshMembers(model, "")) {
    if (k == key) return m;
  }
  return nullptr;
}

Outcome Train(const Job& run) {
  const int world = run.shape.empty() ? 2 : static_cast<int>(run.shape[0] * run.shape[1]);
  Outcome out;
  out.ranks.resize(world, absl::UnknownError("not run"));
  out.second.resize(world, absl::UnknownError("not run"));
  std::vector<int64_t> held(world, 0), held_last(world, 0);
  std::vector<int> grads(world, 0);
  simulate::ClusterOptions options;
  options.collective_timeout = std::chrono::seconds(5);
  SimulatedCluster cluster(world, options);
  const absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    sharded::mesh::MeshPtr mesh;
    if (!run.shape.empty()) {
      absl::StatusOr<sharded::mesh::MeshPtr> made =
          sharded::mesh::DeviceMesh::Create(MeshContextOf(ctx), run.shape, run.mesh_name);
      if (!made.ok()) return made.status();
      mesh = *made;
    }
    ValidatedTp model(run.fail_dp, run.dense, run.sgd, run.fail_validation_from);
    TrainerOptions o;
    o.max_steps = run.steps;
    o.seed = 3;
    o.gradient_clip_norm = 0.5;  // below the norms: every step clips
    o.checkpoint_dir = run.checkpoint_dir;
    o.strategy = run.strategy(mesh);
    o.accumulate_grad_batches = run.accumulate;
    if (run.validate) {
      o.val_check_interval = 2;
      o.limit_val_batches = 1;
      out.ranks[ctx.rank] = Trainer(o).Fit(model, TinyData(), TinyData(), ctx.pg);
    } else {
      out.ranks[ctx.rank] = Trainer(o).Fit(model, TinyData(), ctx.pg);
    }
    if (!out.ranks[ctx.rank].ok()) return absl::OkStatus();
    if (ctx.rank == 0) out.fc_grad = model.fc_grad().clone();
    for (auto& [key, m] : MeshMembers(model, "")) held[ctx.rank] += m->local().numel();
    if (run.second_fit) {
      if (run.between) run.between(model);
      if (run.second_strategy) o.strategy = run.second_strategy(mesh);
      out.second[ctx.rank] = Trainer(o).Fit(model, TinyData(), ctx.pg);
      if (!out.second[ctx.rank].ok()) return absl::OkStatus();
    }
    for (auto& [key, m] : MeshMembers(model, "")) held_last[ctx.rank] += m->local().numel();
    grads[ctx.rank] = Member(model, "fc.weight")->local().grad().defined() ? 1 : 0;
    if (run.predict) {
      const at::Tensor x = TinyData().GetBatch(9)[0];
      at::Tensor prediction;
      const auto predict = [&]() -> absl::Status {
        at::NoGradGuard no_grad;
        prediction = model.Predict(x);
        return absl::OkStatus();
      };
      SL_RETURN_IF_ERROR(o.strategy->name() == "fsdp_tp" ? WithTensorParallelPieces(model, predict) : predict());
      if (ctx.rank == 0) out.prediction = prediction;
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
  for (int r = 0; r < world; ++r) {
    out.held_numel += held[r];
    out.held_numel_last += held_last[r];
    out.fc_weight_grads += grads[r];
  }
  return out;
}

// fsdp_tp whose FsdpOptions::on_unit_collective appends "<collective> <unit> <step>" to (*calls)[rank].
StrategyFor RecordingUnitCollectives(std::vector<std::vector<std::string>>* calls) {
  return [calls](sharded::mesh::MeshPtr mesh) {
    FsdpOptions options;
    const int rank = mesh->rank();
    options.on_unit_collective = [calls, rank](const std::string& collective, const std::string& unit, int64_t step) {
      (*calls)[rank].push_back(absl::StrCat(collective, " ", unit, " ", step));
    };
    return std::make_shared<FsdpTpStrategy>(std::move(mesh), options);
  };
}

std::string ShapeName(const std::vector<int64_t>& shape) { return absl::StrCat(shape[0], "x", shape[1]); }

void ExpectLosses(const Outcome& run, const std::vector<double>& want, const std::string& name, size_t from = 0) {
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    ASSERT_TRUE(run.ranks[r].ok()) << name << " rank " << r << ": " << run.ranks[r].status();
    const std::vector<double>& got = run.ranks[r]->losses;
    ASSERT_EQ(got.size() + from, want.size()) << name;
    for (size_t s = 0; s < got.size(); ++s) {
      EXPECT_NEAR(got[s], want[s + from], 1e-12 * std::abs(want[s + from])) << name << " rank " << r << " step " << s;
    }
  }
}

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
}

TEST(FsdpTpStrategyTest, EveryMeshTrainsAsModelParallelHoldingOneWthOfTheModel) {
  const Outcome one = Train({{1, 1}, kModelParallel});
  ASSERT_TRUE(one.ranks[0].ok()) << one.ranks[0].status();
  const std::vector<double>& want = one.ranks[0]->losses;
  ASSERT_EQ(want.size(), 4u);
  EXPECT_LT(want.back(), want.front());
  const int64_t model_numel = kHidden * kIn + kHidden + kOut * kHidden + kOut;
  // 4x1: fc's 6 rows chunk 2,2,2,0 over DP and proj's 3 rows 1,1,1,0; 1x4 and 2x4: TP pieces of
  // 2,2,2,0 hidden features, the empty one chunked again; 3x2: pieces of 3 rows chunked 1,1,1.
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{1, 1}, {2, 1}, {1, 2}, {2, 2}, {4, 1}, {1, 4}, {3, 2}, {2, 4}}) {
    const std::string name = ShapeName(shape);
    const Outcome mp = Train({shape, kModelParallel});
    const Outcome run = Train({shape, kFsdpTp});
    ExpectLosses(mp, want, name + " model_parallel");
    ExpectLosses(run, want, name + " fsdp_tp");
    // Between steps every element of the model is held once over the world (model_parallel: DP times),
    // but for proj's bias, which TP replicates (as FSDP2 x TP does): once per TP rank.
    EXPECT_EQ(run.held_numel, model_numel + (shape[1] - 1) * kOut) << name;
    // Rank 0 holds the first rows of fc's first TP piece: its reduced, clipped gradient is the 1x1 run's rows.
    ASSERT_TRUE(run.fc_grad.defined()) << name;
    const at::Tensor want_rows = one.fc_grad.narrow(0, 0, run.fc_grad.size(0));
    EXPECT_TRUE(at::allclose(run.fc_grad, want_rows, 1e-12, 1e-15)) << name << ": " << run.fc_grad << " vs " << want_rows;
  }
}

// The checkpoint's keys and global values are model_parallel's: an fsdp_tp
// save resumes under model_parallel and under fsdp_tp on other meshes, and
// model_parallel's under fsdp_tp, each continuing the uninterrupted losses.
TEST(FsdpTpStrategyTest, CheckpointsResumeAcrossStrategiesAndMeshes) {
  const Outcome whole = Train({{1, 1}, kModelParallel, 6});
  ASSERT_TRUE(whole.ranks[0].ok()) << whole.ranks[0].status();
  const std::vector<double>& want = whole.ranks[0]->losses;
  const std::string saved = TestDir("fsdp_tp_2x2");
  const Outcome first = Train({{2, 2}, kFsdpTp, 4, saved});
  ExpectLosses(first, {want.begin(), want.begin() + 4}, "fsdp_tp 2x2 to step 4");
  const std::vector<std::tuple<std::vector<int64_t>, StrategyFor, std::string>> resumes = {
      {{1, 2}, kModelParallel, "model_parallel 1x2"}, {{3, 2}, kFsdpTp, "fsdp_tp 3x2"}, {{1, 1}, kFsdpTp, "fsdp_tp 1x1"}};
  for (size_t i = 0; i < resumes.size(); ++i) {
    const auto& [shape, strategy, name] = resumes[i];
    const std::string dir = TestDir(absl::StrCat("fsdp_tp_resume_", i));
    std::filesystem::remove_all(dir);
    std::filesystem::copy(saved, dir, std::filesystem::copy_options::recursive);
    const Outcome resumed = Train({shape, strategy, 6, dir});
    for (const auto& r : resumed.ranks) {
      ASSERT_TRUE(r.ok()) << name << ": " << r.status();
      EXPECT_EQ(r->start_step, 4) << name;
    }
    ExpectLosses(resumed, want, name, 4);
  }
  const std::string mp_dir = TestDir("model_parallel_2x1");
  const Outcome mp = Train({{2, 1}, kModelParallel, 3, mp_dir});
  ExpectLosses(mp, {want.begin(), want.begin() + 3}, "model_parallel 2x1 to step 3");
  const Outcome resumed = Train({{2, 2}, kFsdpTp, 6, mp_dir});
  ExpectLosses(resumed, want, "fsdp_tp 2x2 from model_parallel's step 3", 3);
}

TEST(FsdpTpStrategyTest, ASecondFitKeepsTheLayout) {
  Job reference{{1, 1}, kModelParallel, 2};
  reference.second_fit = true;
  const Outcome want = Train(reference);
  ASSERT_TRUE(want.ranks[0].ok()) << want.ranks[0].status();
  Job run{{2, 2}, kFsdpTp, 2};
  run.second_fit = true;
  const Outcome twice = Train(run);
  const int64_t model_numel = kHidden * kIn + kHidden + kOut * kHidden + kOut;
  EXPECT_EQ(twice.held_numel, model_numel + kOut);  // proj's bias once per TP rank
  for (size_t r = 0; r < twice.ranks.size(); ++r) {
    ASSERT_TRUE(twice.ranks[r].ok()) << twice.ranks[r].status();
    // A fresh optimizer from the kept chunks: the second Fit continues the first's parameters.
    ASSERT_TRUE(want.second[0].ok()) << want.second[0].status();
    ASSERT_TRUE(twice.second[r].ok()) << twice.second[r].status();
    ASSERT_EQ(twice.second[r]->losses.size(), 2u) << r;
    EXPECT_LT(twice.second[r]->losses[0], twice.ranks[r]->losses[0]) << r;
    for (size_t s = 0; s < 2; ++s) {
      EXPECT_NEAR(twice.second[r]->losses[s], want.second[0]->losses[s], 1e-12 * want.second[0]->losses[s]) << r;
    }
  }
}

// A member frozen after an fsdp_tp Fit stays chunked, and is gathered whole
// for a second Fit's steps and by WithTensorParallelPieces, then chunked
// again; its gradient is never reduce-scattered (it gets none): the second
// Fit trains, and predicts, as model_parallel's with the same member frozen.
TEST(FsdpTpStrategyTest, AMemberFrozenAfterAFitIsStillGatheredAndGetsNoGradient) {
  const auto freeze_fc_weight = [](TinyTp& model) {  // as requires_grad_(False) and grad = None
    at::Tensor weight = Member(model, "fc.weight")->local();
    weight.set_requires_grad(false);
    weight.mutable_grad() = at::Tensor();
  };
  const int64_t model_numel = kHidden * kIn + kHidden + kOut * kHidden + kOut;
  // 2x2: fc's TP pieces of 3 rows chunked 2,1; 4x1: 6 rows chunked 2,2,2,0; 3x2: pieces of 3 rows chunked 1,1,1.
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{2, 2}, {4, 1}, {3, 2}, {1, 2}}) {
    const std::string name = ShapeName(shape);
    Job mp{shape, kModelParallel, 2};
    mp.second_fit = true;
    mp.between = freeze_fc_weight;
    mp.predict = true;
    Job run = mp;
    run.strategy = kFsdpTp;
    const Outcome want = Train(mp);
    const Outcome got = Train(run);
    ASSERT_TRUE(want.second[0].ok()) << name << ": " << want.second[0].status();
    for (size_t r = 0; r < got.ranks.size(); ++r) {
      ASSERT_TRUE(got.second[r].ok()) << name << " rank " << r << ": " << got.second[r].status();
      ASSERT_EQ(got.second[r]->losses.size(), 2u) << name;
      for (size_t s = 0; s < 2; ++s) {
        EXPECT_NEAR(got.second[r]->losses[s], want.second[0]->losses[s], 1e-12 * want.second[0]->losses[s])
            << name << " rank " << r << " step " << s;
      }
    }
    EXPECT_EQ(want.fc_weight_grads, 0) << name;
    EXPECT_EQ(got.fc_weight_grads, 0) << name << ": the frozen member got a gradient";
    EXPECT_EQ(got.held_numel_last, model_numel + (shape[1] - 1) * kOut) << name << ": every member still chunked";
    ASSERT_TRUE(want.prediction.defined() && got.prediction.defined()) << name;
    EXPECT_TRUE(at::allclose(got.prediction, want.prediction, 1e-12, 1e-14))
        << name << ": " << got.prediction << " vs " << want.prediction;
  }
}

// model_parallel refuses, in Setup on every rank, a module whose members an
// earlier fsdp_tp Fit left chunked over DP (frozen ones too), naming the
// member and what to do, instead of computing with the chunks.
TEST(FsdpTpStrategyTest, ModelParallelRefusesMembersAnFsdpTpFitChunked) {
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{2, 2}, {3, 2}, {4, 1}}) {
    for (const bool frozen : {false, true}) {
      const std::string name = absl::StrCat(ShapeName(shape), frozen ? " (fc.weight frozen)" : "");
      Job run{shape, kFsdpTp, 2};
      run.second_fit = true;
      run.second_strategy = kModelParallel;
      if (frozen) run.between = [](TinyTp& model) { Member(model, "fc.weight")->local().set_requires_grad(false); };
      const Outcome got = Train(run);
      for (size_t r = 0; r < got.ranks.size(); ++r) {
        ASSERT_TRUE(got.ranks[r].ok()) << name << " rank " << r << ": " << got.ranks[r].status();
        ASSERT_FALSE(got.second[r].ok()) << name << " rank " << r << ": model_parallel trained the chunks";
        EXPECT_TRUE(absl::IsFailedPrecondition(got.second[r].status())) << name << ": " << got.second[r].status();
        const std::string message(got.second[r].status().message());
        EXPECT_THAT(message, HasSubstr("the mesh member 'fc.weight'")) << name;
        EXPECT_THAT(message, HasSubstr("held chunked over the data-parallel ranks by an earlier fsdp_tp Fit")) << name;
        EXPECT_THAT(message, HasSubstr("fit it with FsdpTpStrategy")) << name;
      }
    }
  }
}

// Whether fsdp_tp holds a member is a mark of the view object it made, not of
// a mesh's name: a user mesh named as DeviceMesh::Permuted names that view
// trains under fsdp_tp and model_parallel alike, and a second Fit of each
// keeps its layout.
TEST(FsdpTpStrategyTest, AMeshNamedLikeTheLayoutViewIsNotTakenForIt) {
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{2, 2}, {3, 2}}) {
    const std::string name = ShapeName(shape);
    Job mp{shape, kModelParallel, 2};
    mp.mesh_name = "t(dims 1,0)";
    mp.second_fit = true;
    Job run = mp;
    run.strategy = kFsdpTp;
    const Outcome want = Train(mp);
    const Outcome got = Train(run);
    for (const Outcome* o : {&want, &got}) {
      const std::string which = o == &want ? " model_parallel" : " fsdp_tp";
      ASSERT_TRUE(o->ranks[0].ok()) << name << which << ": " << o->ranks[0].status();
      ExpectLosses(*o, want.ranks[0]->losses, name + which);
      for (size_t r = 0; r < o->second.size(); ++r) {
        ASSERT_TRUE(o->second[r].ok()) << name << which << " second Fit, rank " << r << ": " << o->second[r].status();
        EXPECT_NEAR(o->second[r]->losses[0], want.second[0]->losses[0], 1e-12 * want.second[0]->losses[0]) << name;
      }
    }
  }
}

// A validation (no backward) gathers the pieces but reduce-scatters nothing:
// the unit's reduce-scatter comes once per training step only, and the
// validation losses are model_parallel's. A validation failing on one DP
// group still fails every rank with its error (the verdict is agreed over
// the world without the reduction).
TEST(FsdpTpStrategyTest, AValidationGathersButReduceScattersNoGradients) {
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{2, 2}, {4, 1}, {3, 2}}) {
    const std::string name = ShapeName(shape);
    const int world = static_cast<int>(shape[0] * shape[1]);
    std::vector<std::vector<std::string>> calls(world);
    Job run{shape, nullptr, 4};
    run.validate = true;
    run.strategy = RecordingUnitCollectives(&calls);
    Job mp{shape, kModelParallel, 4};
    mp.validate = true;
    const Outcome want = Train(mp);
    const Outcome got = Train(run);
    ASSERT_TRUE(want.ranks[0].ok()) << name << ": " << want.ranks[0].status();
    ExpectLosses(got, want.ranks[0]->losses, name);
    // The last validation left each chunk the gradient of the last training step: the first rows of
    // model_parallel's without validation (model_parallel's validation sums its stale gradients over DP again).
    const Outcome unvalidated = Train({shape, kModelParallel, 4});
    ASSERT_TRUE(got.fc_grad.defined() && unvalidated.fc_grad.defined()) << name;
    const at::Tensor want_rows = unvalidated.fc_grad.narrow(0, 0, got.fc_grad.size(0));
    EXPECT_TRUE(at::allclose(got.fc_grad, want_rows, 1e-12, 1e-15))
        << name << ": " << got.fc_grad << " vs " << want_rows;
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(got.ranks[r].ok()) << name;
      const size_t validations = got.ranks[r]->validations.size();
      ASSERT_EQ(validations, 2u) << name;
      for (size_t v = 0; v < validations; ++v) {
        const double w = want.ranks[0]->validations[v].second.at("val_loss");
        EXPECT_NEAR(got.ranks[r]->validations[v].second.at("val_loss"), w, 1e-12 * w) << name << " validation " << v;
      }
      std::vector<std::string> reduce_scatters;
      int64_t gathers = 0;
      for (const std::string& call : calls[r]) {
        if (absl::StartsWith(call, "reduce-scatter")) reduce_scatters.push_back(call);
        if (absl::StartsWith(call, "all-gather")) ++gathers;
      }
      EXPECT_EQ(reduce_scatters, (std::vector<std::string>{"reduce-scatter model 0", "reduce-scatter model 1",
                                                           "reduce-scatter model 2", "reduce-scatter model 3"}))
          << name << " rank " << r;
      EXPECT_GT(gathers, 4 + static_cast<int64_t>(validations)) << name << " rank " << r << ": the sanity pass too";
    }
  }
  // DP group 1 of a 2x2 mesh (ranks 2, 3) fails its ValidationStep.
  Job failing{{2, 2}, kFsdpTp, 4};
  failing.validate = true;
  failing.fail_validation_from = 2;
  const Outcome failed = Train(failing);
  for (int r = 0; r < 4; ++r) {
    ASSERT_FALSE(failed.ranks[r].ok()) << "rank " << r;
    EXPECT_THAT(std::string(failed.ranks[r].status().message()), HasSubstr("failed on rank 2")) << "rank " << r;
    EXPECT_THAT(std::string(failed.ranks[r].status().message()), HasSubstr("val batch unreadable")) << "rank " << r;
  }
}

// Gradient accumulation and validation (the strategy's BeforeStep and
// ReduceGradients around ValidationStep) train as under model_parallel.
TEST(FsdpTpStrategyTest, AccumulationAndValidationTrainAsModelParallel) {
  for (const int64_t accumulate : {int64_t{1}, int64_t{2}}) {
    Job mp{{2, 2}, kModelParallel, 4};
    mp.accumulate = accumulate;
    mp.validate = true;
    Job fsdp_tp = mp;
    fsdp_tp.strategy = kFsdpTp;
    const Outcome want = Train(mp);
    const Outcome got = Train(fsdp_tp);
    ASSERT_TRUE(want.ranks[0].ok()) << want.ranks[0].status();
    ExpectLosses(got, want.ranks[0]->losses, absl::StrCat("accumulate ", accumulate));
    for (size_t r = 0; r < got.ranks.size(); ++r) {
      ASSERT_TRUE(got.ranks[r].ok()) << got.ranks[r].status();
      ASSERT_EQ(got.ranks[r]->validations.size(), 2u) << r;
      for (size_t v = 0; v < 2; ++v) {
        const double w = want.ranks[0]->validations[v].second.at("val_loss");
        EXPECT_NEAR(got.ranks[r]->validations[v].second.at("val_loss"), w, 1e-12 * w) << r << " validation " << v;
      }
    }
  }
}

// After a Fit, WithTensorParallelPieces runs on the gathered TP slices (the
// prediction is model_parallel's) and leaves each member its chunk, also when
// the function throws.
TEST(FsdpTpStrategyTest, WithTensorParallelPiecesGathersAndRestoresTheChunks) {
  Job mp{{2, 2}, kModelParallel, 3};
  mp.predict = true;
  Job fsdp_tp = mp;
  fsdp_tp.strategy = kFsdpTp;
  const Outcome want = Train(mp);
  const Outcome got = Train(fsdp_tp);
  ASSERT_TRUE(got.ranks[0].ok()) << got.ranks[0].status();
  ASSERT_TRUE(want.prediction.defined() && got.prediction.defined());
  EXPECT_TRUE(at::allclose(got.prediction, want.prediction, 1e-12, 1e-14)) << got.prediction << " vs " << want.prediction;

  SimulatedCluster cluster(4);
  const absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    SL_ASSIGN_OR_RETURN(sharded::mesh::MeshPtr mesh, sharded::mesh::DeviceMesh::Create(MeshContextOf(ctx), {2, 2}, "t"));
    TinyTp model(-1, -1, false, at::kDouble);
    TrainerOptions o;
    o.max_steps = 1;
    o.strategy = std::make_shared<FsdpTpStrategy>(mesh);
    SL_RETURN_IF_ERROR(Trainer(o).Fit(model, TinyData(), ctx.pg).status());
    const auto fc_rows = [&]() -> int64_t {
      for (const auto& [key, member] : MeshMembers(model, "")) {
        if (key == "fc.weight") return member->local().size(0);
      }
      return -1;
    };
    const int64_t chunk = fc_rows();  // fc's TP slice of 3 rows, chunked 2, 1 over DP
    EXPECT_EQ(chunk, mesh->coords()[0] == 0 ? 2 : 1) << ctx.rank;
    const absl::Status thrown = WithTensorParallelPieces(model, [&]() -> absl::Status {
      EXPECT_EQ(fc_rows(), 3) << ctx.rank;
      throw std::runtime_error("evaluation broke");
    });
    EXPECT_THAT(std::string(thrown.message()), HasSubstr("evaluation broke")) << ctx.rank;
    EXPECT_EQ(fc_rows(), chunk) << ctx.rank;
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

// SGD with momentum (tp::MeshSgdOptimizer) under both mesh strategies: the
// same losses on every mesh, and its momentum buffers resume from an fsdp_tp
// checkpoint under model_parallel and fsdp_tp on other meshes, continuing
// the uninterrupted losses (a lost or misplaced buffer changes them).
TEST(FsdpTpStrategyTest, SgdTrainsAndResumesUnderBothMeshStrategies) {
  Job base{{1, 1}, kModelParallel, 6};
  base.sgd = true;
  const Outcome whole = Train(base);
  ASSERT_TRUE(whole.ranks[0].ok()) << whole.ranks[0].status();
  const std::vector<double>& want = whole.ranks[0]->losses;
  ASSERT_EQ(want.size(), 6u);
  EXPECT_LT(want.back(), want.front());
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{2, 1}, {1, 4}, {2, 2}, {3, 2}}) {
    for (const auto& [strategy, name] : {std::pair{kModelParallel, "model_parallel"}, std::pair{kFsdpTp, "fsdp_tp"}}) {
      Job run{shape, strategy, 6};
      run.sgd = true;
      ExpectLosses(Train(run), want, ShapeName(shape) + " sgd " + name);
    }
  }
  const std::string saved = TestDir("fsdp_tp_sgd_2x2");
  std::filesystem::remove_all(saved);
  Job first{{2, 2}, kFsdpTp, 3, saved};
  first.sgd = true;
  ExpectLosses(Train(first), {want.begin(), want.begin() + 3}, "sgd fsdp_tp 2x2 to step 3");
  const std::vector<std::tuple<std::vector<int64_t>, StrategyFor, std::string>> resumes = {
      {{1, 2}, kModelParallel, "model_parallel 1x2"}, {{3, 1}, kFsdpTp, "fsdp_tp 3x1"}};
  for (size_t i = 0; i < resumes.size(); ++i) {
    const auto& [shape, strategy, name] = resumes[i];
    const std::string dir = TestDir(absl::StrCat("fsdp_tp_sgd_resume_", i));
    std::filesystem::remove_all(dir);
    std::filesystem::copy(saved, dir, std::filesystem::copy_options::recursive);
    Job resumed{shape, strategy, 6, dir};
    resumed.sgd = true;
    const Outcome got = Train(resumed);
    for (const auto& r : got.ranks) {
      ASSERT_TRUE(r.ok()) << name << ": " << r.status();
      EXPECT_EQ(r->start_step, 3) << name;
    }
    ExpectLosses(got, want, "sgd resumed under " + name, 3);
  }
}

// FsdpOptions::on_unit_collective, where fault tools kill a rank
// (tools/train --die_in): every rank enters the one unit's DP all-gather and
// then its reduce-scatter once per step, with the step; a step that fails
// before its reduction (its verdict) reports no reduce-scatter.
TEST(FsdpTpStrategyTest, UnitCollectiveHookSeesTheModelsGatherAndReduceScatterEachStep) {
  for (const bool failing : {false, true}) {
    std::vector<std::vector<std::string>> calls(4);
    Job run{{2, 2}, nullptr, 3};
    run.fail_dp = failing ? 1 : -1;  // TinyTp fails DP rank 1's batch at step 2
    run.strategy = RecordingUnitCollectives(&calls);
    const Outcome outcome = Train(run);
    std::vector<std::string> want;
    for (int64_t step = 0; step < 3; ++step) {
      want.push_back(absl::StrCat("all-gather model ", step));
      if (failing && step == 2) break;
      want.push_back(absl::StrCat("reduce-scatter model ", step));
    }
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(outcome.ranks[r].ok(), !failing) << "rank " << r;
      EXPECT_EQ(calls[r], want) << "rank " << r << (failing ? " (failing step 2)" : "");
    }
  }
}

TEST(FsdpTpStrategyTest, AFailedStepFailsEveryRankNamingIt) {
  Job run{{2, 2}};
  run.fail_dp = 1;
  const Outcome failed = Train(run);
  for (int r = 0; r < 4; ++r) {
    ASSERT_FALSE(failed.ranks[r].ok()) << "rank " << r << " trained";
    EXPECT_THAT(std::string(failed.ranks[r].status().message()), HasSubstr("training step 2 failed on rank 2"))
        << "rank " << r;
    EXPECT_THAT(std::string(failed.ranks[r].status().message()), HasSubstr("batch unreadable")) << "rank " << r;
  }
}

TEST(FsdpTpStrategyTest, BadMeshesParametersAndOptionsFailEveryRank) {
  const auto expect_everywhere = [](const Outcome& run, const std::string& want) {
    for (size_t r = 0; r < run.ranks.size(); ++r) {
      ASSERT_FALSE(run.ranks[r].ok()) << want << " rank " << r;
      EXPECT_THAT(std::string(run.ranks[r].status().message()), HasSubstr(want)) << "rank " << r;
    }
  };
  expect_everywhere(Train({{}}), "fsdp_tp needs a 2-d device mesh");
  Job dense{{1, 2}};
  dense.dense = true;
  expect_everywhere(Train(dense), "has the dense parameter 'scale'");
  FsdpOptions units;
  units.units = {"fc"};
  FsdpOptions per_unit;
  per_unit.per_unit = true;
  FsdpOptions bf16;
  bf16.param_dtype = at::kBFloat16;
  for (const auto& [options, name] : {std::pair{units, "units"}, std::pair{per_unit, "per_unit"},
                                      std::pair{bf16, "param_dtype"}}) {
    Job bad{{2, 1}};
    bad.strategy = [options = options](sharded::mesh::MeshPtr mesh) {
      return std::make_shared<FsdpTpStrategy>(std::move(mesh), options);
    };
    expect_everywhere(Train(bad), absl::StrCat("FsdpOptions::", name));
  }
}

}  // namespace
}  // namespace shardlight::lightning
