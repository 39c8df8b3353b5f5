// The LM job on thread-ranks (a small GPT for speed): the same losses on
// 1x1 and 2x2; a 2x2 checkpoint resumed on 1x3 and 4x1 continues with the
// uninterrupted run's losses; bad input -- a TP size that does not divide the
// heads or the MLP, a vocabulary smaller than TP, a missing or empty corpus,
// a checkpoint of another model shape -- fails on every rank before training.
// Also: float64 runs (the mesh's rounding gone: 1x1 and 1x2 agree far below
// float32's), the gradient dumps, and resuming from a DCP checkpoint.
#include "simulate/lm_run.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lightning/sharded_module.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/interop/dcp/dcp_writer.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"
#include "simulate/training_run.h"

namespace shardlight::simulate {
namespace {

using ::testing::HasSubstr;

LmJobOptions Small() {
  LmJobOptions job;
  job.model.dim = 48;
  job.model.heads = 12;
  job.model.mlp_hidden = 96;
  job.model.layers = 2;
  job.model.context = 32;
  job.batch = 6;
  job.steps = 6;
  job.eval_batches = 1;
  return job;
}

// Every rank's result (or every rank's error, rank order).
struct Outcome {
  std::vector<absl::StatusOr<LmRankResult>> ranks;
};

sharded::mesh::MeshContext MeshContextOf(const RankContext& ctx) {
  sharded::mesh::MeshContext mesh;
  mesh.store = ctx.store;
  mesh.rank = ctx.rank;
  mesh.world_size = ctx.world_size;
  mesh.world = ctx.pg;
  return mesh;
}

Outcome RunLm(LmJobOptions job, std::vector<int64_t> shape, const std::string& strategy = "model_parallel") {
  job.mesh_shape = shape;
  job.strategy = strategy;
  const int world = static_cast<int>(shape[0] * shape[1]);
  SimulatedCluster cluster(world);
  Outcome out;
  out.ranks.resize(world, absl::UnknownError("not run"));
  const absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    out.ranks[ctx.rank] = RunLmRank(job, MeshContextOf(ctx));
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

double RelDiff(double a, double b) { return std::abs(a - b) / std::abs(b); }

TEST(LmRunTest, MeshesTrainTheSameAndResumeOnOtherMeshes) {
  TempDir dir;
  LmJobOptions job = Small();
  const Outcome single = RunLm(job, {1, 1});
  ASSERT_TRUE(single.ranks[0].ok()) << single.ranks[0].status();
  job.checkpoint_dir = dir.path();
  job.save_at = 3;
  const Outcome mesh = RunLm(job, {2, 2});
  for (const auto& r : mesh.ranks) ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<double>& want = single.ranks[0]->losses;
  const std::vector<double>& got = mesh.ranks[0]->losses;
  ASSERT_EQ(got.size(), 6u);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_LT(RelDiff(got[i], want[i]), 1e-5) << "step " << i;
  EXPECT_LT(got.back(), got.front());  // it learns
  EXPECT_NEAR(std::log(256.0), got.front(), 0.1);  // a fresh model is near uniform
  EXPECT_GT(mesh.ranks[0]->eval_perplexity, 1.0);
  for (const auto& shape : {std::vector<int64_t>{1, 3}, std::vector<int64_t>{4, 1}}) {
    const Outcome resumed = RunLm(job, shape);
    for (const auto& r : resumed.ranks) {
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->start_step, 3);
      ASSERT_EQ(r->losses.size(), 3u);
      for (size_t i = 0; i < 3; ++i) {
        EXPECT_LT(RelDiff(r->losses[i], got[3 + i]), 1e-5) << shape[0] << "x" << shape[1] << " step " << 3 + i;
      }
    }
  }
}

void ExpectEveryRankFails(const Outcome& outcome, const std::string& text) {
  for (size_t r = 0; r < outcome.ranks.size(); ++r) {
    ASSERT_FALSE(outcome.ranks[r].ok()) << "rank " << r << " trained";
    EXPECT_THAT(std::string(outcome.ranks[r].status().message()), HasSubstr(text)) << "rank " << r;
  }
}

TEST(LmRunTest, BadInputFailsOnEveryRank) {
  LmJobOptions job = Small();
  job.model.heads = 6;
  ExpectEveryRankFails(RunLm(job, {1, 4}), "tensor-parallel size 4 does not divide the 6 attention heads");
  job = Small();
  job.model.mlp_hidden = 90;
  ExpectEveryRankFails(RunLm(job, {1, 4}), "does not divide the MLP hidden size 90");
  job = Small();
  job.model.vocab = 3;
  ExpectEveryRankFails(RunLm(job, {1, 4}), "a vocabulary of 3 cannot be split over 4");
  job = Small();
  job.corpus = "/nonexistent/corpus.txt";
  ExpectEveryRankFails(RunLm(job, {2, 1}), "corpus '/nonexistent/corpus.txt' is missing");
  TempDir dir;
  job.corpus = dir.path() + "/empty.txt";
  std::ofstream(job.corpus).close();
  ExpectEveryRankFails(RunLm(job, {2, 1}), "holds 0 bytes");
}

TEST(LmRunTest, CheckpointOfAnotherModelShapeFailsOnEveryRank) {
  TempDir dir;
  LmJobOptions job = Small();
  job.steps = 1;
  job.checkpoint_dir = dir.path();
  const Outcome saved = RunLm(job, {2, 1});
  ASSERT_TRUE(saved.ranks[0].ok()) << saved.ranks[0].status();
  job.steps = 2;
  job.model.dim = 24;  // another shape, same keys
  ExpectEveryRankFails(RunLm(job, {1, 2}), "model structure differs");
}

TEST(LmRunTest, Float64RunsAgreeAcrossMeshesFarBelowFloat32) {
  LmJobOptions job = Small();
  job.steps = 4;
  const Outcome f32 = RunLm(job, {1, 1});
  job.model.dtype = at::kDouble;
  const Outcome single = RunLm(job, {1, 1});
  const Outcome mesh = RunLm(job, {1, 2});
  ASSERT_TRUE(f32.ranks[0].ok()) << f32.ranks[0].status();
  ASSERT_TRUE(single.ranks[0].ok()) << single.ranks[0].status();
  ASSERT_TRUE(mesh.ranks[0].ok()) << mesh.ranks[0].status();
  // The same initial weights (float32's, widened): step 1 agrees to float32's rounding.
  EXPECT_LT(RelDiff(single.ranks[0]->losses[0], f32.ranks[0]->losses[0]), 1e-6);
  EXPECT_NE(single.ranks[0]->losses[0], f32.ranks[0]->losses[0]);  // but it is computed in float64
  EXPECT_EQ(single.ranks[0]->state_bytes, 2 * f32.ranks[0]->state_bytes);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_LT(RelDiff(mesh.ranks[0]->losses[i], single.ranks[0]->losses[i]), 1e-12) << "step " << i + 1;
  }
}

// On one rank: the checkpoint in `dir` as dense tensors of the LM's keys (the
// model's, read off a 1x1 GptModel of `job`), strictly loaded.
absl::StatusOr<sharded::StateDict> DenseCheckpoint(const LmJobOptions& job, const std::string& dir) {
  SimulatedCluster cluster(1);
  absl::StatusOr<sharded::StateDict> out = absl::UnknownError("not run");
  const absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    SL_ASSIGN_OR_RETURN(auto mesh, sharded::mesh::DeviceMesh::Create(MeshContextOf(ctx), {1, 1}, "dense"));
    GptModel model(job.model);
    SL_RETURN_IF_ERROR(model.ConfigureShardedModel({ctx.pg, 0, 1, 1, mesh}));
    sharded::StateDict dict;
    for (const auto& [key, m] : lightning::MeshMembers(model, "")) {
      SL_RETURN_IF_ERROR(dict.Insert("model." + key, at::zeros(m->sizes(), m->dtype())));
      SL_RETURN_IF_ERROR(dict.Insert("optimizer." + key + ".exp_avg", at::zeros(m->sizes(), m->dtype())));
      SL_RETURN_IF_ERROR(dict.Insert("optimizer." + key + ".exp_avg_sq", at::zeros(m->sizes(), m->dtype())));
    }
    SL_RETURN_IF_ERROR(dict.Insert("optimizer.step", at::zeros({1}, at::kLong)));
    SL_RETURN_IF_ERROR(dict.InsertValue("trainer.step", sharded::PlainValue()));  // values, as the Trainer saves them
    SL_RETURN_IF_ERROR(dict.InsertValue("optimizer.hyper_parameters", sharded::PlainValue()));
    SL_RETURN_IF_ERROR(sharded::checkpoint::LoadCheckpoint(dict, dir, *ctx.pg));
    out = std::move(dict);
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return out;
}

absl::Status SaveDcp(const sharded::StateDict& dict, const std::string& dir) {
  SimulatedCluster cluster(1);
  return cluster.Run([&](RankContext& ctx) { return sharded::checkpoint::dcp::SaveDcpCheckpoint(dict, dir, *ctx.pg); });
}

TEST(LmRunTest, ResumesFromADcpCheckpointOnAnotherMesh) {
  TempDir own, dcp, partial;
  LmJobOptions job = Small();
  job.checkpoint_dir = own.path();
  job.save_at = 3;
  const Outcome full = RunLm(job, {2, 2});
  ASSERT_TRUE(full.ranks[0].ok()) << full.ranks[0].status();
  absl::StatusOr<sharded::StateDict> dense = DenseCheckpoint(job, own.path());
  ASSERT_TRUE(dense.ok()) << dense.status();
  ASSERT_TRUE(SaveDcp(*dense, dcp.path()).ok());
  ASSERT_FALSE(sharded::checkpoint::HasCommittedCheckpoint(dcp.path()));  // DCP's .metadata only
  job.checkpoint_dir = dcp.path();
  job.save_at = -1;  // at the end, in shardlight's format, beside the DCP files
  const Outcome resumed = RunLm(job, {1, 3});
  for (const auto& r : resumed.ranks) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->resumed_from_dcp);
    EXPECT_EQ(r->start_step, 3);
    ASSERT_EQ(r->losses.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_LT(RelDiff(r->losses[i], full.ranks[0]->losses[3 + i]), 1e-5) << "step " << 4 + i;
  }
  // It saved its own checkpoint there at the end: the next resume reads that one.
  job.steps = 7;
  const Outcome again = RunLm(job, {1, 3});
  ASSERT_TRUE(again.ranks[0].ok()) << again.ranks[0].status();
  EXPECT_FALSE(again.ranks[0]->resumed_from_dcp);
  EXPECT_EQ(again.ranks[0]->start_step, 6);
  // A DCP checkpoint without the optimizer's state (the Trainer's rule):
  // the weights and the step resume, the optimizer starts fresh, so the
  // losses after the first step differ from the uninterrupted run's.
  sharded::StateDict weights, no_head;
  for (const auto& [key, value] : dense->entries()) {
    if (key.rfind("optimizer.", 0) != 0) {
      ASSERT_TRUE(weights.Insert(key, value).ok());
      if (key != "model.head.weight") {
        ASSERT_TRUE(no_head.Insert(key, value).ok());
      }
    }
  }
  // The step is a value (the Trainer saves it so): it goes with the weights.
  for (const auto& [name, value] : dense->values()) {
    ASSERT_TRUE(weights.InsertValue(name, value).ok());
    ASSERT_TRUE(no_head.InsertValue(name, value).ok());
  }
  ASSERT_TRUE(SaveDcp(weights, partial.path()).ok());
  job.checkpoint_dir = partial.path();
  job.steps = 6;
  const Outcome fresh_optimizer = RunLm(job, {1, 2});
  for (const auto& r : fresh_optimizer.ranks) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->resumed_from_dcp);
    EXPECT_EQ(r->start_step, 3);
    ASSERT_EQ(r->losses.size(), 3u);
    EXPECT_LT(RelDiff(r->losses[0], full.ranks[0]->losses[3]), 1e-5);  // the same weights
    EXPECT_GT(RelDiff(r->losses[2], full.ranks[0]->losses[5]), 1e-5);  // other moments
  }
  // Without one of the model's entries: every rank names it.
  TempDir headless;
  ASSERT_TRUE(SaveDcp(no_head, headless.path()).ok());
  job.checkpoint_dir = headless.path();
  ExpectEveryRankFails(RunLm(job, {1, 2}), "e.g. 'model.head.weight'");
}

TEST(LmRunTest, SavesTheGradientsOfTheFirstSteps) {
  TempDir one, two;
  LmJobOptions job = Small();
  job.steps = 3;
  job.grads_steps = 2;
  job.grads_dir = one.path();
  ASSERT_TRUE(RunLm(job, {1, 1}).ranks[0].ok());
  job.grads_dir = two.path();
  ASSERT_TRUE(RunLm(job, {2, 2}).ranks[0].ok());
  for (const std::string& dir : {one.path(), two.path()}) {
    EXPECT_TRUE(sharded::checkpoint::HasCommittedCheckpoint(dir + "/step1")) << dir;
    EXPECT_TRUE(sharded::checkpoint::HasCommittedCheckpoint(dir + "/step2")) << dir;
    EXPECT_FALSE(sharded::checkpoint::HasCommittedCheckpoint(dir + "/step3")) << dir;
  }
  // The same gradients (summed over DP) from either mesh, and not zero.
  const std::vector<std::pair<std::string, std::vector<int64_t>>> keys = {
      {"grad.tok.weight", {256, 48}}, {"grad.block1.mlp.proj.weight", {48, 96}}, {"grad.head.weight", {256, 48}}};
  SimulatedCluster cluster(1);
  const absl::Status compared = cluster.Run([&](RankContext& ctx) -> absl::Status {
    for (int step = 1; step <= 2; ++step) {
      sharded::StateDict a, b;
      for (const auto& [key, sizes] : keys) {
        SL_RETURN_IF_ERROR(a.Insert(key, at::zeros(sizes)));
        SL_RETURN_IF_ERROR(b.Insert(key, at::zeros(sizes)));
      }
      sharded::checkpoint::LoadOptions some;
      some.strict = false;
      SL_RETURN_IF_ERROR(sharded::checkpoint::LoadCheckpoint(a, absl::StrCat(one.path(), "/step", step), *ctx.pg, some));
      SL_RETURN_IF_ERROR(sharded::checkpoint::LoadCheckpoint(b, absl::StrCat(two.path(), "/step", step), *ctx.pg, some));
      for (const auto& [key, sizes] : keys) {
        const at::Tensor x = std::get<at::Tensor>(*a.Find(key)), y = std::get<at::Tensor>(*b.Find(key));
        const double scale = x.abs().max().item<double>();
        EXPECT_GT(scale, 0) << key << " step " << step;
        EXPECT_LT((x - y).abs().max().item<double>(), 1e-4 * scale) << key << " step " << step;
      }
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(compared.ok()) << compared;
}

TEST(LmRunTest, BadDtypeOrGradientDumpFailsOnEveryRank) {
  LmJobOptions job = Small();
  job.model.dtype = at::kHalf;
  ExpectEveryRankFails(RunLm(job, {1, 2}), "computes in float32 or float64, not Half");
  job = Small();
  job.grads_steps = 1;
  ExpectEveryRankFails(RunLm(job, {2, 1}), "needs a directory (grads_dir)");
}

// The strategies' test model: a TP-free GPT whose dim-0 sizes split unevenly
// over 3 and 4 ranks (vocabulary 256 -> 86, 86, 84; MLP 90 -> 23, 23, 23,
// 21; context 30 -> 8, 8, 8, 6) and a global batch of 6 (at W=4: 2, 2, 2, 0
// samples -- one rank trains on none).
LmJobOptions StrategiesModel(at::ScalarType dtype) {
  LmJobOptions job = Small();
  job.model.dim = 24;
  job.model.heads = 4;
  job.model.mlp_hidden = 90;
  job.model.context = 30;
  job.model.dtype = dtype;
  job.steps = 4;
  return job;
}

// fsdp (fully_shard per block), ddp and model_parallel (DP x 1) train the
// same model at W = 1..4: per-step losses and the held-out perplexity (fsdp:
// evaluated on gathered parameters), all within fp64 1e-12 / fp32 1e-6
// relative of ddp's (measured: fp64 <= 2e-16; fp32 fsdp 0, model_parallel,
// whose TP layers compute with other kernels, <= 9e-8).
TEST(LmStrategiesTest, FsdpDdpAndModelParallelTrainTheSame) {
  for (const at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    const bool fp64 = dtype == at::kDouble;
    const LmJobOptions job = StrategiesModel(dtype);
    for (int64_t w = 1; w <= 4; ++w) {
      const Outcome ddp = RunLm(job, {w, 1}, "ddp");
      ASSERT_TRUE(ddp.ranks[0].ok()) << ddp.ranks[0].status();
      for (const auto& [strategy, tolerance] : std::vector<std::pair<std::string, double>>{
               {"fsdp", fp64 ? 1e-12 : 1e-6}, {"model_parallel", fp64 ? 1e-12 : 1e-6}}) {
        const Outcome other = RunLm(job, {w, 1}, strategy);
        double worst = 0, worst_ppl = 0;
        for (size_t r = 0; r < other.ranks.size(); ++r) {
          ASSERT_TRUE(other.ranks[r].ok()) << strategy << " W=" << w << " rank " << r << ": " << other.ranks[r].status();
          const std::vector<double>& got = other.ranks[r]->losses;
          const std::vector<double>& want = ddp.ranks[0]->losses;
          ASSERT_EQ(got.size(), want.size());
          for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, RelDiff(got[i], want[i]));
          worst_ppl = std::max(worst_ppl, RelDiff(other.ranks[r]->eval_perplexity, ddp.ranks[0]->eval_perplexity));
        }
        EXPECT_LT(worst, tolerance) << strategy << " W=" << w << " " << c10::toString(dtype);
        EXPECT_LT(worst_ppl, tolerance) << strategy << " W=" << w << " " << c10::toString(dtype);
        std::cout << c10::toString(dtype) << " W=" << w << " " << strategy << " vs ddp: largest relative loss "
                  << "difference " << worst << ", held-out perplexity " << worst_ppl << "\n";
      }
      EXPECT_LT(ddp.ranks[0]->losses.back(), ddp.ranks[0]->losses.front());  // it learns
    }
  }
}

// Under fsdp each rank's optimizer state is its dim-0 chunk: the ranks'
// state bytes add up to the whole model's (uneven chunks included).
TEST(LmStrategiesTest, FsdpShardsTheTrainingState) {
  const LmJobOptions job = StrategiesModel(at::kFloat);
  const Outcome ddp = RunLm(job, {1, 1}, "ddp");
  const Outcome fsdp = RunLm(job, {3, 1}, "fsdp");
  ASSERT_TRUE(ddp.ranks[0].ok()) << ddp.ranks[0].status();
  int64_t total = 0;
  for (const auto& r : fsdp.ranks) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LT(r->state_bytes, ddp.ranks[0]->state_bytes / 2);
    total += r->state_bytes;
  }
  EXPECT_EQ(total, ddp.ranks[0]->state_bytes);
}

// A checkpoint saved under fsdp resumes under model_parallel on a TP mesh
// (the same keys), under ddp and under fsdp on another world size,
// continuing with the uninterrupted (ddp) run's losses (float64, 1e-12
// relative).
TEST(LmStrategiesTest, FsdpCheckpointResumesUnderOtherStrategies) {
  TempDir dir;
  LmJobOptions job = StrategiesModel(at::kDouble);
  const Outcome full = RunLm(job, {1, 1}, "ddp");
  ASSERT_TRUE(full.ranks[0].ok()) << full.ranks[0].status();
  job.checkpoint_dir = dir.path();
  job.steps = 2;
  ASSERT_TRUE(RunLm(job, {3, 1}, "fsdp").ranks[0].ok());
  job.steps = 4;
  job.save_at = 0;  // not again
  for (const auto& [shape, strategy] : std::vector<std::pair<std::vector<int64_t>, std::string>>{
           {{1, 2}, "model_parallel"}, {{2, 1}, "ddp"}, {{4, 1}, "fsdp"}}) {
    const Outcome resumed = RunLm(job, shape, strategy);
    ASSERT_TRUE(resumed.ranks[0].ok()) << strategy << ": " << resumed.ranks[0].status();
    EXPECT_EQ(resumed.ranks[0]->start_step, 2) << strategy;
    ASSERT_EQ(resumed.ranks[0]->losses.size(), 2u) << strategy;
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_LT(RelDiff(resumed.ranks[0]->losses[i], full.ranks[0]->losses[2 + i]), 1e-12) << strategy << " step " << 3 + i;
    }
  }
}

// fsdp_tp (the TP build, each TP piece chunked again over the DP ranks)
// trains the GPT as model_parallel does on the same meshes -- losses and the
// held-out perplexity (evaluated on the gathered pieces) within float64 1e-12
// relative, uneven DP chunks (3x2) and a rank without samples (4x1)
// included -- while the ranks' training state adds up to model_parallel's
// over one DP group (the TP-replicated norms and biases once per TP rank);
// its checkpoint resumes under fsdp, model_parallel and fsdp_tp on other
// meshes with the uninterrupted losses.
TEST(LmStrategiesTest, FsdpTpTrainsAsModelParallelAndItsCheckpointResumesUnderOthers) {
  TempDir dir;
  LmJobOptions job = StrategiesModel(at::kDouble);
  const Outcome single = RunLm(job, {1, 1});
  ASSERT_TRUE(single.ranks[0].ok()) << single.ranks[0].status();
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{2, 2}, {3, 2}, {4, 1}}) {
    const std::string name = absl::StrCat(shape[0], "x", shape[1]);
    const Outcome mp = RunLm(job, shape);
    const Outcome fsdp_tp = RunLm(job, shape, "fsdp_tp");
    ASSERT_TRUE(mp.ranks[0].ok()) << name << ": " << mp.ranks[0].status();
    int64_t state = 0;
    for (size_t r = 0; r < fsdp_tp.ranks.size(); ++r) {
      ASSERT_TRUE(fsdp_tp.ranks[r].ok()) << name << " rank " << r << ": " << fsdp_tp.ranks[r].status();
      const std::vector<double>& got = fsdp_tp.ranks[r]->losses;
      ASSERT_EQ(got.size(), mp.ranks[0]->losses.size()) << name;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_LT(RelDiff(got[i], mp.ranks[0]->losses[i]), 1e-12) << name << " rank " << r << " step " << i + 1;
      }
      EXPECT_LT(RelDiff(fsdp_tp.ranks[r]->eval_perplexity, mp.ranks[0]->eval_perplexity), 1e-12) << name;
      state += fsdp_tp.ranks[r]->state_bytes;
    }
    // model_parallel holds its pieces DP times over the world, fsdp_tp once (TP-replicated ones once per TP rank).
    int64_t replicated = 0;
    for (const auto& r : mp.ranks) replicated += r->state_bytes;
    EXPECT_EQ(state * shape[0], replicated) << name;
    EXPECT_LT(state, single.ranks[0]->state_bytes * 11 / 10) << name;
  }
  job.checkpoint_dir = dir.path();
  job.steps = 2;
  ASSERT_TRUE(RunLm(job, {2, 2}, "fsdp_tp").ranks[0].ok());
  job.steps = 4;
  job.save_at = 0;  // not again
  for (const auto& [shape, strategy] : std::vector<std::pair<std::vector<int64_t>, std::string>>{
           {{3, 1}, "fsdp"}, {{1, 2}, "model_parallel"}, {{3, 2}, "fsdp_tp"}}) {
    const Outcome resumed = RunLm(job, shape, strategy);
    ASSERT_TRUE(resumed.ranks[0].ok()) << strategy << ": " << resumed.ranks[0].status();
    EXPECT_EQ(resumed.ranks[0]->start_step, 2) << strategy;
    ASSERT_EQ(resumed.ranks[0]->losses.size(), 2u) << strategy;
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_LT(RelDiff(resumed.ranks[0]->losses[i], single.ranks[0]->losses[2 + i]), 1e-12)
          << strategy << " step " << 3 + i;
    }
  }
}

// Under fsdp the LM saves under torch's own names (save_format torch_dcp:
// model., optim.state., optim.param_groups.; lightning/torch_checkpoint.h) on 3
// ranks and resumes from that on 2 with the uninterrupted run's losses
// (float64: 1e-12). Another learning rate, or a model of another shape, fails
// every rank naming what differs. (PyTorch FSDP2 reading and writing the same
// names: //tools/lm:lm_fsdp_resume_*_test.)
TEST(LmStrategiesTest, TorchNamedCheckpointResumesOnAnotherWorldSize) {
  TempDir dir;
  LmJobOptions job = Small();
  job.model.dtype = at::kDouble;
  job.steps = 4;
  job.checkpoint_dir = dir.path();
  job.save_at = 2;
  job.save_format = "torch_dcp";
  const Outcome full = RunLm(job, {3, 1}, "fsdp");
  for (const auto& r : full.ranks) ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(full.ranks[0]->losses.size(), 4u);
  job.save_at = -1;
  job.save_format = "shardlight";
  LmJobOptions other = job;
  other.adam.lr = 2e-3;
  ExpectEveryRankFails(RunLm(other, {2, 1}, "fsdp"), "optim.param_groups.0.lr is 0.001, this run's lr is 0.002");
  other = job;
  other.model.mlp_hidden = 48;
  ExpectEveryRankFails(RunLm(other, {2, 1}, "fsdp"), "'model.block0.mlp.fc.weight' has sizes [96, 48]");
  const Outcome resumed = RunLm(job, {2, 1}, "fsdp");  // last: it saves shardlight's format there at the end
  for (const auto& r : resumed.ranks) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->start_step, 2);
    EXPECT_TRUE(r->resumed_from_dcp);
    ASSERT_EQ(r->losses.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_LT(RelDiff(r->losses[i], full.ranks[0]->losses[2 + i]), 1e-12) << "step " << 3 + i;
    }
  }
}

TEST(LmStrategiesTest, BadStrategyFailsOnEveryRank) {
  const LmJobOptions job = Small();
  ExpectEveryRankFails(RunLm(job, {2, 1}, "zero3"), "strategy 'zero3' is not one of model_parallel, fsdp_tp, fsdp, ddp, hsdp");
  ExpectEveryRankFails(RunLm(job, {1, 2}, "fsdp"), "the fsdp strategy is data parallel only: the mesh must be Nx1, not 1x2");
  ExpectEveryRankFails(RunLm(job, {2, 2}, "ddp"), "the ddp strategy is data parallel only");
  LmJobOptions grads = Small();
  grads.grads_steps = 1;
  grads.grads_dir = "/tmp";
  ExpectEveryRankFails(RunLm(grads, {2, 1}, "fsdp"), "under model_parallel only, not fsdp");
  LmJobOptions torch_names = Small();
  torch_names.checkpoint_dir = "/tmp";
  torch_names.save_format = "torch_dcp";
  ExpectEveryRankFails(RunLm(torch_names, {2, 1}, "fsdp"), "save_format torch_dcp saves at save_at (>= 0, not -1)");
  torch_names.save_at = 1;
  ExpectEveryRankFails(RunLm(torch_names, {1, 2}), "under fsdp or ddp (not model_parallel)");
  LmJobOptions deferred = Small();
  deferred.model.deferred_init = true;
  ExpectEveryRankFails(RunLm(deferred, {2, 2}, "fsdp_tp"), "fsdp_tp builds each rank's tensor-parallel slices");
  torch_names.save_format = "torch";
  ExpectEveryRankFails(RunLm(torch_names, {2, 1}, "fsdp"), "save_format 'torch' is not shardlight or torch_dcp");
}

}  // namespace
}  // namespace shardlight::simulate
