#include "simulate/mesh_scenario.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "simulate/core/simulated_cluster.h"
#include "simulate/mesh_run.h"
#include "simulate/training_run.h"

namespace shardlight::simulate {
namespace {

sharded::mesh::MeshContext ContextOf(const RankContext& ctx, std::chrono::milliseconds timeout) {
  sharded::mesh::MeshContext mesh;
  mesh.store = ctx.store;
  mesh.rank = ctx.rank;
  mesh.world_size = ctx.world_size;
  mesh.world = ctx.pg;
  mesh.timeout = timeout;
  return mesh;
}

}  // namespace

absl::Status RunMeshScenario(const ScenarioOptions& options, std::ostream& out) {
  TempDir temp;  // removed on every return
  MeshJobOptions job;
  job.steps = options.steps;
  job.seed = options.seed;
  job.checkpoint_dir = options.checkpoint_dir.empty() ? temp.path() : options.checkpoint_dir;
  if (job.checkpoint_dir.empty()) return absl::InternalError("could not create a temporary checkpoint directory");
  std::vector<at::Tensor> dense_weights;
  const std::vector<double> dense = TrainMeshDense(options.seed, options.steps, &dense_weights);

  ClusterOptions cluster_options;
  cluster_options.collective_timeout = options.collective_timeout;
  // Train on a 2 x 2 mesh, then save.
  job.mesh_shape = {2, 2};
  SimulatedCluster four(4, cluster_options);
  auto trained = four.Run([&](RankContext& ctx) { return TrainMeshRank(job, ContextOf(ctx, options.collective_timeout)); });
  if (!trained.ok()) return trained.status();
  const MeshRankResult& saved = (*trained)[0];
  for (size_t i = 0; i < dense_weights.size(); ++i) {
    if (!at::allclose(saved.weights[i], dense_weights[i], 1e-10, 1e-12)) {
      return absl::InternalError("trained weights on the 2x2 mesh differ from the dense training");
    }
  }
  out << "mesh: trained " << options.steps
      << " steps on a 2x2 mesh (dim 0 data parallel, dim 1 tensor parallel; the weights are mesh members of the "
         "module)\n";
  for (int s = 0; s < options.steps; ++s) {
    const double mesh_loss = saved.losses[s];
    if (std::abs(mesh_loss - dense[s]) > 1e-9 * std::max(1.0, std::abs(dense[s]))) {
      return absl::InternalError(absl::StrCat("step ", s, ": loss on the mesh ", mesh_loss, " != dense ", dense[s]));
    }
    out << absl::StrFormat("  step %d loss %.9f (dense %.9f)\n", s, mesh_loss, dense[s]);
  }
  out << "mesh: saved model digest " << saved.digest << "\n";

  // Reload on a 1 x 3 mesh: bit-equal to the saved weights.
  job.mesh_shape = {1, 3};
  SimulatedCluster three(3, cluster_options);
  auto loaded = three.Run([&](RankContext& ctx) { return LoadMeshRank(job, ContextOf(ctx, options.collective_timeout)); });
  if (!loaded.ok()) return loaded.status();
  for (const MeshRankResult& r : *loaded) {
    if (r.digest != saved.digest) {
      return absl::InternalError(absl::StrCat("weights loaded on the 1x3 mesh (digest ", r.digest,
                                              ") differ from the saved ones (", saved.digest, ")"));
    }
  }
  out << "mesh: checkpoint of the 2x2 mesh reloaded on a 1x3 mesh; loaded model equals saved: yes\n";
  out << "mesh: loaded model digest " << (*loaded)[0].digest << "\n";
  return absl::OkStatus();
}

}  // namespace shardlight::simulate
