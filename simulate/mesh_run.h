// The mesh job: a tensor-parallel pair of linear layers (column- then
// row-parallel, the Partial output reduced over the TP sub-group) trained
// data- and tensor-parallel on a DP x TP device mesh, checkpointed through the
// module's state dict (the weights are mesh members of a LightningModule), and
// reloaded on another mesh. One code path for thread-ranks (`//simulate:cluster
// --scenario=mesh`) and real processes (`//tools/train --job=mesh`): both call
// TrainMeshRank / LoadMeshRank with the MeshContext of their ranks.
#ifndef SHARDLIGHT_SIMULATE_MESH_RUN_H_
#define SHARDLIGHT_SIMULATE_MESH_RUN_H_

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lightning/lightning_module.h"
#include "sharded/mesh/device_mesh.h"
#include "sharded/mesh/mesh_tensor.h"

namespace shardlight::simulate {

struct MeshJobOptions {
  // Mesh dim 0 is data parallel, dim 1 tensor parallel: exactly 2 dims.
  std::vector<int64_t> mesh_shape = {2, 2};
  int steps = 5;
  uint64_t seed = 1234;
  std::string checkpoint_dir;  // TrainMeshRank: saves here when set; LoadMeshRank: loads from here
};

// The model: "column.weight" [H, D] placed (Replicate, Shard(0)) and
// "row.weight" [O, H] placed (Replicate, Shard(1)), each a mesh member of a
// child module, so StateDictOf / LoadStateDict carry them.
class MeshMlp : public lightning::LightningModule {
 public:
  // Collective over the mesh's world. `random`: the seed's global-index
  // values (the same on any mesh), else zeros.
  static absl::StatusOr<std::shared_ptr<MeshMlp>> Create(sharded::mesh::MeshPtr mesh, uint64_t seed, bool random);

  sharded::mesh::MeshTensor& column() { return *column_->mesh_tensor("weight"); }
  sharded::mesh::MeshTensor& row() { return *row_->mesh_tensor("weight"); }
  // Collective: both full weights, on every rank.
  absl::StatusOr<std::vector<at::Tensor>> FullWeights();

 private:
  MeshMlp();
  std::shared_ptr<lightning::ShardedModule> column_;
  std::shared_ptr<lightning::ShardedModule> row_;
};

struct MeshRankResult {
  std::vector<double> losses;       // the global loss of each step trained
  std::vector<at::Tensor> weights;  // full, after training or loading
  std::string digest;               // TensorsDigest(weights)
  bool loaded = false;              // RunMeshJob: loaded from the checkpoint rather than trained
};

// Collective over ctx.world: options.steps steps on a new mesh of
// options.mesh_shape, then (with a checkpoint_dir) a checkpoint of the
// module's state dict. InvalidArgument on every rank for a mesh that is not
// 2-d or does not match the world.
absl::StatusOr<MeshRankResult> TrainMeshRank(const MeshJobOptions& options, const sharded::mesh::MeshContext& ctx);

// Collective over ctx.world: a zero model on a new mesh of options.mesh_shape
// loads options.checkpoint_dir through the module's load hooks.
absl::StatusOr<MeshRankResult> LoadMeshRank(const MeshJobOptions& options, const sharded::mesh::MeshContext& ctx);

// Collective over ctx.world: LoadMeshRank when options.checkpoint_dir holds
// a committed checkpoint (the ranks agree that it does: InvalidArgument on
// every rank when they see different things), else TrainMeshRank.
absl::StatusOr<MeshRankResult> RunMeshJob(const MeshJobOptions& options, const sharded::mesh::MeshContext& ctx);

// The same training done densely on one process: the losses, and the final
// weights in `weights`.
std::vector<double> TrainMeshDense(uint64_t seed, int steps, std::vector<at::Tensor>* weights);

}  // namespace shardlight::simulate

#endif  // SHARDLIGHT_SIMULATE_MESH_RUN_H_
