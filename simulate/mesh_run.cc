#include "simulate/mesh_run.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lightning/state_dict_hooks.h"
#include "sharded/agreement.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/global_random.h"
#include "sharded/sharding_spec.h"
#include "sharded/stable_hash.h"
#include "sharded/status_macros.h"
#include "simulate/training_run.h"

namespace shardlight::simulate {
namespace {

using sharded::mesh::DeviceMesh;
using sharded::mesh::MeshContext;
using sharded::mesh::MeshFactory;
using sharded::mesh::MeshFactoryOptions;
using sharded::mesh::MeshInit;
using sharded::mesh::MeshPlacement;
using sharded::mesh::MeshPtr;
using sharded::mesh::MeshTensor;
using sharded::mesh::Placements;

// Sizes: batch N, input D, hidden H (uneven over 2 and 3 ranks), output O.
constexpr int64_t kBatch = 8, kIn = 6, kHidden = 5, kOut = 4;
constexpr double kLearningRate = 0.05;

// W1 [H, D] is column-parallel (Shard(0) over TP), W2 [O, H] row-parallel
// (Shard(1) over TP); both replicated over DP.
const Placements kColumn = {MeshPlacement::Replicate(), MeshPlacement::Shard(0)};
const Placements kRow = {MeshPlacement::Replicate(), MeshPlacement::Shard(1)};

at::Tensor DenseRandn(const std::vector<int64_t>& sizes, uint64_t seed) {
  at::Tensor t = at::empty(sizes, at::kDouble);
  sharded::FillGlobalRandom(t, std::vector<int64_t>(sizes.size(), 0), sizes, seed, sharded::RandomKind::kNormal);
  return t;
}

absl::StatusOr<MeshPtr> MakeMesh(const MeshJobOptions& options, const MeshContext& ctx, const std::string& name) {
  if (options.mesh_shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("the mesh job needs a 2-d mesh (data parallel x tensor parallel), not ",
                                                   absl::StrJoin(options.mesh_shape, "x")));
  }
  return DeviceMesh::Create(ctx, options.mesh_shape, name);
}

// One step on this rank's rows of the batch; returns the global loss.
absl::StatusOr<double> Step(MeshMlp& model, const MeshPtr& mesh, const at::Tensor& x, const at::Tensor& target) {
  const at::Tensor& w1 = model.column().local();
  const at::Tensor& w2 = model.row().local();
  at::Tensor pre = x.matmul(w1.t()), h = pre.relu();
  // Row-parallel output: each TP rank holds an addend of y (Partial).
  SL_ASSIGN_OR_RETURN(MeshTensor y_partial,
                      MeshTensor::FromLocal(h.matmul(w2.t()), mesh,
                                            {MeshPlacement::Shard(0), MeshPlacement::Partial()}, {kBatch, kOut}));
  SL_ASSIGN_OR_RETURN(MeshTensor y, y_partial.Redistribute({MeshPlacement::Shard(0), MeshPlacement::Replicate()}));
  at::Tensor diff = y.local() - target;
  at::Tensor dy = diff * (2.0 / (kBatch * kOut));
  // Each DP rank's loss addend, summed over the DP sub-group.
  SL_ASSIGN_OR_RETURN(MeshTensor loss,
                      MeshTensor::FromLocal(diff.pow(2).sum().div(kBatch * kOut).reshape({1}), mesh,
                                            {MeshPlacement::Partial(), MeshPlacement::Replicate()}, {1}));
  SL_ASSIGN_OR_RETURN(at::Tensor loss_sum, loss.FullTensor());
  // Local gradients of this rank's weight pieces, Partial over DP.
  at::Tensor dw2 = dy.t().matmul(h);
  at::Tensor dpre = dy.matmul(w2) * (pre > 0).to(at::kDouble);
  at::Tensor dw1 = dpre.t().matmul(x);
  SL_ASSIGN_OR_RETURN(MeshTensor g1, MeshTensor::FromLocal(dw1, mesh, {MeshPlacement::Partial(), kColumn[1]},
                                                           {kHidden, kIn}));
  SL_ASSIGN_OR_RETURN(MeshTensor g2, MeshTensor::FromLocal(dw2, mesh, {MeshPlacement::Partial(), kRow[1]},
                                                           {kOut, kHidden}));
  SL_ASSIGN_OR_RETURN(MeshTensor r1, g1.Redistribute(kColumn));
  SL_ASSIGN_OR_RETURN(MeshTensor r2, g2.Redistribute(kRow));
  w1.sub_(kLearningRate * r1.local());
  w2.sub_(kLearningRate * r2.local());
  return loss_sum.item<double>();
}

absl::StatusOr<MeshRankResult> Finish(MeshMlp& model, std::vector<double> losses) {
  MeshRankResult result;
  result.losses = std::move(losses);
  SL_ASSIGN_OR_RETURN(result.weights, model.FullWeights());
  result.digest = TensorsDigest(result.weights);
  return result;
}

}  // namespace

MeshMlp::MeshMlp()
    : LightningModule("MeshMlp"),
      column_(register_module("column", std::make_shared<lightning::ShardedModule>("ColumnParallel"))),
      row_(register_module("row", std::make_shared<lightning::ShardedModule>("RowParallel"))) {}

absl::StatusOr<std::shared_ptr<MeshMlp>> MeshMlp::Create(MeshPtr mesh, uint64_t seed, bool random) {
  std::shared_ptr<MeshMlp> model(new MeshMlp());
  MeshFactoryOptions init;
  init.dtype = at::kDouble;
  init.init = random ? MeshInit::kRandn : MeshInit::kZeros;
  init.seed = seed;
  SL_ASSIGN_OR_RETURN(MeshTensor w1, MeshFactory(mesh, kColumn, {kHidden, kIn}, init));
  init.seed = seed + 1;
  SL_ASSIGN_OR_RETURN(MeshTensor w2, MeshFactory(mesh, kRow, {kOut, kHidden}, init));
  w1.local().mul_(0.5);
  w2.local().mul_(0.5);
  SL_RETURN_IF_ERROR(model->column_->RegisterMeshTensor("weight", std::move(w1)));
  SL_RETURN_IF_ERROR(model->row_->RegisterMeshTensor("weight", std::move(w2)));
  return model;
}

absl::StatusOr<std::vector<at::Tensor>> MeshMlp::FullWeights() {
  SL_ASSIGN_OR_RETURN(at::Tensor w1, column().FullTensor());
  SL_ASSIGN_OR_RETURN(at::Tensor w2, row().FullTensor());
  return std::vector<at::Tensor>{w1, w2};
}

absl::StatusOr<MeshRankResult> TrainMeshRank(const MeshJobOptions& options, const MeshContext& ctx) {
  SL_ASSIGN_OR_RETURN(MeshPtr mesh, MakeMesh(options, ctx, "mesh_job"));
  SL_ASSIGN_OR_RETURN(std::shared_ptr<MeshMlp> model, MeshMlp::Create(mesh, options.seed, /*random=*/true));
  // This DP rank's rows of the batch.
  const auto rows = sharded::ChunkRanges(kBatch, mesh->size(0))[mesh->coords()[0]];
  const at::Tensor x = DenseRandn({kBatch, kIn}, options.seed + 2).narrow(0, rows.first, rows.second);
  const at::Tensor target = DenseRandn({kBatch, kOut}, options.seed + 3).narrow(0, rows.first, rows.second);
  std::vector<double> losses;
  for (int s = 0; s < options.steps; ++s) {
    SL_ASSIGN_OR_RETURN(double loss, Step(*model, mesh, x, target));
    losses.push_back(loss);
  }
  if (!options.checkpoint_dir.empty()) {
    SL_ASSIGN_OR_RETURN(sharded::StateDict dict, lightning::StateDictOf(*model));
    SL_RETURN_IF_ERROR(sharded::checkpoint::SaveCheckpoint(dict, options.checkpoint_dir, *ctx.world));
  }
  return Finish(*model, std::move(losses));
}

absl::StatusOr<MeshRankResult> LoadMeshRank(const MeshJobOptions& options, const MeshContext& ctx) {
  SL_ASSIGN_OR_RETURN(MeshPtr mesh, MakeMesh(options, ctx, "mesh_load"));
  SL_ASSIGN_OR_RETURN(std::shared_ptr<MeshMlp> model, MeshMlp::Create(mesh, options.seed, /*random=*/false));
  // As the Trainer resumes: fresh tensors of the module's layout are filled
  // from the checkpoint, then reach the module through its load hooks.
  SL_ASSIGN_OR_RETURN(sharded::StateDict current, lightning::StateDictOf(*model));
  sharded::StateDict fresh;
  for (const auto& [key, value] : current.entries()) {
    SL_RETURN_IF_ERROR(fresh.Insert(key, std::get<sharded::ShardedTensor>(value).ZerosLike(false)));
  }
  SL_RETURN_IF_ERROR(sharded::checkpoint::LoadCheckpoint(fresh, options.checkpoint_dir, *ctx.world));
  SL_RETURN_IF_ERROR(lightning::LoadStateDict(*model, std::move(fresh), /*strict=*/true).status());
  return Finish(*model, {});
}

absl::StatusOr<MeshRankResult> RunMeshJob(const MeshJobOptions& options, const MeshContext& ctx) {
  const bool found =
      !options.checkpoint_dir.empty() && sharded::checkpoint::HasCommittedCheckpoint(options.checkpoint_dir);
  SL_RETURN_IF_ERROR(sharded::AgreeOn(*ctx.world, sharded::StableHash(found ? "found" : "none"),
                                      {absl::StrCat("mesh job checkpoint lookup in ", options.checkpoint_dir),
                                       "whether a committed checkpoint is there"}));
  if (!found) return TrainMeshRank(options, ctx);
  SL_ASSIGN_OR_RETURN(MeshRankResult result, LoadMeshRank(options, ctx));
  result.loaded = true;
  return result;
}

std::vector<double> TrainMeshDense(uint64_t seed, int steps, std::vector<at::Tensor>* weights) {
  at::Tensor w1 = DenseRandn({kHidden, kIn}, seed) * 0.5, w2 = DenseRandn({kOut, kHidden}, seed + 1) * 0.5;
  const at::Tensor x = DenseRandn({kBatch, kIn}, seed + 2), target = DenseRandn({kBatch, kOut}, seed + 3);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    at::Tensor pre = x.matmul(w1.t()), h = pre.relu(), y = h.matmul(w2.t());
    at::Tensor diff = y - target;
    losses.push_back(diff.pow(2).mean().item<double>());
    at::Tensor dy = diff * (2.0 / diff.numel());
    at::Tensor dw2 = dy.t().matmul(h);
    at::Tensor dpre = dy.matmul(w2) * (pre > 0).to(at::kDouble);
    at::Tensor dw1 = dpre.t().matmul(x);
    w1 -= kLearningRate * dw1;
    w2 -= kLearningRate * dw2;
  }
  *weights = {w1, w2};
  return losses;
}

}  // namespace shardlight::simulate
