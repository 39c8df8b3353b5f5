#include "simulate/mesh_scenario.h"

#include <cmath>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/global_random.h"
#include "sharded/mesh/device_mesh.h"
#include "sharded/mesh/mesh_checkpoint.h"
#include "sharded/mesh/mesh_tensor.h"
#include "sharded/sharding_spec.h"
#include "sharded/state_dict.h"
#include "simulate/core/simulated_cluster.h"
#include "simulate/training_run.h"

namespace shardlight::simulate {
namespace {

using sharded::mesh::DeviceMesh;
using sharded::mesh::MeshContext;
using sharded::mesh::MeshFactory;
using sharded::mesh::MeshFactoryOptions;
using sharded::mesh::MeshInit;
using sharded::mesh::MeshPlacement;
using sharded::mesh::MeshTensor;
using sharded::mesh::Placements;

// Sizes: batch N, input D, hidden H (uneven over 2 and 3 ranks), output O.
constexpr int64_t kBatch = 8, kIn = 6, kHidden = 5, kOut = 4;
constexpr double kLearningRate = 0.05;

MeshContext ContextOf(const RankContext& ctx, std::chrono::milliseconds timeout) {
  return MeshContext{ctx.store, ctx.rank, ctx.world_size, ctx.pg, timeout};
}

at::Tensor DenseRandn(const std::vector<int64_t>& sizes, uint64_t seed) {
  at::Tensor t = at::empty(sizes, at::kDouble);
  sharded::FillGlobalRandom(t, std::vector<int64_t>(sizes.size(), 0), sizes, seed, sharded::RandomKind::kNormal);
  return t;
}

// Mesh dims: 0 data parallel, 1 tensor parallel. W1 [H, D] is column-parallel
// (Shard(0) over TP), W2 [O, H] row-parallel (Shard(1) over TP).
const Placements kW1 = {MeshPlacement::Replicate(), MeshPlacement::Shard(0)};
const Placements kW2 = {MeshPlacement::Replicate(), MeshPlacement::Shard(1)};

struct Losses {
  std::vector<double> per_step;
};

// The dense reference: the same model and steps on one process.
Losses TrainDense(uint64_t seed, int steps, at::Tensor* w1_out, at::Tensor* w2_out) {
  at::Tensor w1 = DenseRandn({kHidden, kIn}, seed) * 0.5, w2 = DenseRandn({kOut, kHidden}, seed + 1) * 0.5;
  const at::Tensor x = DenseRandn({kBatch, kIn}, seed + 2), target = DenseRandn({kBatch, kOut}, seed + 3);
  Losses losses;
  for (int s = 0; s < steps; ++s) {
    at::Tensor pre = x.matmul(w1.t()), h = pre.relu(), y = h.matmul(w2.t());
    at::Tensor diff = y - target;
    losses.per_step.push_back(diff.pow(2).mean().item<double>());
    at::Tensor dy = diff * (2.0 / diff.numel());
    at::Tensor dw2 = dy.t().matmul(h);
    at::Tensor dpre = dy.matmul(w2) * (pre > 0).to(at::kDouble);
    at::Tensor dw1 = dpre.t().matmul(x);
    w1 -= kLearningRate * dw1;
    w2 -= kLearningRate * dw2;
  }
  *w1_out = w1;
  *w2_out = w2;
  return losses;
}

}  // namespace

absl::Status RunMeshScenario(const ScenarioOptions& options, std::ostream& out) {
  const int steps = options.steps;
  TempDir temp;  // removed on every return
  const std::string dir = options.checkpoint_dir.empty() ? temp.path() : options.checkpoint_dir;
  if (dir.empty()) return absl::InternalError("could not create a temporary checkpoint directory");
  at::Tensor dense_w1, dense_w2, saved_w1, saved_w2;  // saved_*: written by rank 0
  const Losses dense = TrainDense(options.seed, steps, &dense_w1, &dense_w2);

  ClusterOptions cluster_options;
  cluster_options.collective_timeout = options.collective_timeout;
  // Train on a 2 x 2 mesh, then save.
  SimulatedCluster four(4, cluster_options);
  auto trained = four.Run([&](RankContext& ctx) -> absl::StatusOr<std::vector<double>> {
    auto mesh = DeviceMesh::Create(ContextOf(ctx, options.collective_timeout), {2, 2}, "dp_tp");
    if (!mesh.ok()) return mesh.status();
    MeshFactoryOptions init;
    init.dtype = at::kDouble;
    init.init = MeshInit::kRandn;
    init.seed = options.seed;
    auto w1 = MeshFactory(*mesh, kW1, {kHidden, kIn}, init);
    init.seed = options.seed + 1;
    auto w2 = MeshFactory(*mesh, kW2, {kOut, kHidden}, init);
    if (!w1.ok()) return w1.status();
    if (!w2.ok()) return w2.status();
    w1->local().mul_(0.5);
    w2->local().mul_(0.5);
    // This DP rank's rows of the batch.
    const int64_t dp = (*mesh)->coords()[0];
    const auto rows = sharded::ChunkRanges(kBatch, 2)[dp];
    const at::Tensor x = DenseRandn({kBatch, kIn}, options.seed + 2).narrow(0, rows.first, rows.second);
    const at::Tensor target = DenseRandn({kBatch, kOut}, options.seed + 3).narrow(0, rows.first, rows.second);
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) {
      at::Tensor pre = x.matmul(w1->local().t()), h = pre.relu();
      // Row-parallel output: each TP rank holds an addend of y (Partial).
      auto y_partial = MeshTensor::FromLocal(h.matmul(w2->local().t()), *mesh,
                                             {MeshPlacement::Shard(0), MeshPlacement::Partial()}, {kBatch, kOut});
      if (!y_partial.ok()) return y_partial.status();
      auto y = y_partial->Redistribute({MeshPlacement::Shard(0), MeshPlacement::Replicate()});
      if (!y.ok()) return y.status();
      at::Tensor diff = y->local() - target;
      at::Tensor dy = diff * (2.0 / (kBatch * kOut));
      // Each DP rank's loss addend; summed over the DP sub-group.
      auto loss = MeshTensor::FromLocal(diff.pow(2).sum().div(kBatch * kOut).reshape({1}), *mesh,
                                        {MeshPlacement::Partial(), MeshPlacement::Replicate()}, {1});
      if (!loss.ok()) return loss.status();
      auto loss_sum = loss->FullTensor();
      if (!loss_sum.ok()) return loss_sum.status();
      losses.push_back(loss_sum->item<double>());
      // Local gradients of this rank's weight pieces, Partial over DP.
      at::Tensor dw2 = dy.t().matmul(h);
      at::Tensor dpre = dy.matmul(w2->local()) * (pre > 0).to(at::kDouble);
      at::Tensor dw1 = dpre.t().matmul(x);
      auto g1 = MeshTensor::FromLocal(dw1, *mesh, {MeshPlacement::Partial(), kW1[1]}, {kHidden, kIn});
      auto g2 = MeshTensor::FromLocal(dw2, *mesh, {MeshPlacement::Partial(), kW2[1]}, {kOut, kHidden});
      if (!g1.ok()) return g1.status();
      if (!g2.ok()) return g2.status();
      auto r1 = g1->Redistribute(kW1);
      auto r2 = g2->Redistribute(kW2);
      if (!r1.ok()) return r1.status();
      if (!r2.ok()) return r2.status();
      w1->local().sub_(kLearningRate * r1->local());
      w2->local().sub_(kLearningRate * r2->local());
    }
    sharded::StateDict sd;
    auto v1 = sharded::mesh::ViewForSave(*w1);
    auto v2 = sharded::mesh::ViewForSave(*w2);
    if (!v1.ok()) return v1.status();
    if (!v2.ok()) return v2.status();
    if (absl::Status s = sd.Insert("tp.column.weight", *v1); !s.ok()) return s;
    if (absl::Status s = sd.Insert("tp.row.weight", *v2); !s.ok()) return s;
    if (absl::Status s = sharded::checkpoint::SaveCheckpoint(sd, dir, *ctx.pg); !s.ok()) return s;
    auto f1 = w1->FullTensor();
    auto f2 = w2->FullTensor();
    if (!f1.ok()) return f1.status();
    if (!f2.ok()) return f2.status();
    if (!at::allclose(*f1, dense_w1, 1e-10, 1e-12) || !at::allclose(*f2, dense_w2, 1e-10, 1e-12)) {
      return absl::InternalError("trained weights on the 2x2 mesh differ from the dense training");
    }
    if (ctx.rank == 0) {
      saved_w1 = *f1;
      saved_w2 = *f2;
    }
    return losses;
  });
  if (!trained.ok()) return trained.status();
  out << "mesh: trained " << steps << " steps on a 2x2 mesh (dim 0 data parallel, dim 1 tensor parallel)\n";
  for (int s = 0; s < steps; ++s) {
    const double mesh_loss = (*trained)[0][s];
    if (std::abs(mesh_loss - dense.per_step[s]) > 1e-9 * std::max(1.0, std::abs(dense.per_step[s]))) {
      return absl::InternalError(absl::StrCat("step ", s, ": loss on the mesh ", mesh_loss, " != dense ",
                                              dense.per_step[s]));
    }
    out << absl::StrFormat("  step %d loss %.9f (dense %.9f)\n", s, mesh_loss, dense.per_step[s]);
  }

  // Reload on a 1 x 3 mesh: bit-equal to the saved weights.
  SimulatedCluster three(3, cluster_options);
  absl::Status reloaded = three.Run([&](RankContext& ctx) -> absl::Status {
    auto mesh = DeviceMesh::Create(ContextOf(ctx, options.collective_timeout), {1, 3}, "reload");
    if (!mesh.ok()) return mesh.status();
    MeshFactoryOptions zeros;
    zeros.dtype = at::kDouble;
    auto w1 = MeshFactory(*mesh, kW1, {kHidden, kIn}, zeros);
    auto w2 = MeshFactory(*mesh, kW2, {kOut, kHidden}, zeros);
    if (!w1.ok()) return w1.status();
    if (!w2.ok()) return w2.status();
    auto v1 = sharded::mesh::ViewForLoad(*w1);
    auto v2 = sharded::mesh::ViewForLoad(*w2);
    if (!v1.ok()) return v1.status();
    if (!v2.ok()) return v2.status();
    sharded::StateDict sd;
    if (absl::Status s = sd.Insert("tp.column.weight", *v1); !s.ok()) return s;
    if (absl::Status s = sd.Insert("tp.row.weight", *v2); !s.ok()) return s;
    if (absl::Status s = sharded::checkpoint::LoadCheckpoint(sd, dir, *ctx.pg); !s.ok()) return s;
    if (absl::Status s = sharded::mesh::CompleteLoad(*w1); !s.ok()) return s;
    if (absl::Status s = sharded::mesh::CompleteLoad(*w2); !s.ok()) return s;
    auto f1 = w1->FullTensor();
    auto f2 = w2->FullTensor();
    if (!f1.ok()) return f1.status();
    if (!f2.ok()) return f2.status();
    if (!at::equal(*f1, saved_w1) || !at::equal(*f2, saved_w2)) {
      return absl::InternalError("weights loaded on the 1x3 mesh differ from the saved ones");
    }
    return absl::OkStatus();
  });
  if (!reloaded.ok()) return reloaded;
  out << "mesh: checkpoint of the 2x2 mesh reloaded on a 1x3 mesh; loaded model equals saved: yes\n";
  return absl::OkStatus();
}

}  // namespace shardlight::simulate
