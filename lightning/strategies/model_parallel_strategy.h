// ModelParallelStrategy: data parallel x tensor parallel on a 2-d device
// mesh, as Lightning 2.x's ModelParallelStrategy: dim 0 data parallel (DP),
// dim 1 tensor parallel (TP). The Trainer hands the mesh to the module's
// ConfigureShardedModel (ShardedContext::mesh), where the module builds its
// tensor-parallel layers (//lightning/tp: parameters are mesh members,
// Shard on TP and Replicate on DP); after backward every mesh member's
// gradient is summed over the DP group (tp::AllreduceDataParallelGrads), the
// step's verdict agreed over the whole world first (so a TP peer of a failed
// rank never waits in a DP collective). The loss is summed over the DP group
// (the module returns its DP share of the global loss, the same on the TP
// ranks of one DP group). Clipping takes the global norm over the mesh
// (tp::ClipGradNorm: TP-sharded pieces summed over TP, replicated ones
// once). Every trainable must be a mesh member; the module's optimizer
// updates them (tp::MeshAdamWOptimizer).
//
// A strategy holds its rank's mesh, so each rank has its own instance (the
// caller makes the mesh: sharded::mesh::DeviceMesh::Create).
//
// Setup errors (local; agreed by the Trainer as configure's, so on every
// rank before any collective): InvalidArgument when the mesh is null, not
// 2-d, or its size is not the world's, and for a trainable dense parameter
// or ShardedTensor member (named); FailedPrecondition when the module's
// parameters are held sharded by an earlier fsdp Fit, or when a mesh member
// (trainable or frozen; named) is held chunked over DP by an earlier fsdp_tp
// Fit: fit such a module with FsdpTpStrategy, or resume a fresh one from its
// checkpoint. A step failing on any rank fails every rank with that rank's
// error.
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_MODEL_PARALLEL_STRATEGY_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_MODEL_PARALLEL_STRATEGY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "lightning/strategies/strategy.h"
#include "sharded/mesh/device_mesh.h"

namespace shardlight::lightning {

class ModelParallelStrategy : public Strategy {
 public:
  // Called on every rank after each step's gradient reduction, before
  // clipping, with the 0-based step (collective if it communicates; its
  // error fails the step). For parity debugging: saving the reduced
  // gradients.
  using ReducedHook = std::function<absl::Status(int64_t step)>;

  explicit ModelParallelStrategy(sharded::mesh::MeshPtr mesh, ReducedHook on_reduced = nullptr)
      : mesh_(std::move(mesh)), on_reduced_(std::move(on_reduced)) {}
  std::string name() const override { return "model_parallel"; }
  sharded::mesh::MeshPtr mesh() const override { return mesh_; }
  absl::StatusOr<std::unique_ptr<StrategyRun>> Setup(LightningModule& module,
                                                     const ShardedContext& ctx) const override;

 private:
  sharded::mesh::MeshPtr mesh_;
  ReducedHook on_reduced_;
};

// Local: what the strategies that lay a module out on a DP x TP mesh
// (model_parallel, fsdp_tp) require of it in Setup. FailedPrecondition when
// its parameters are held sharded by an earlier fsdp Fit; InvalidArgument
// naming a trainable dense parameter or ShardedTensor member (every
// trainable must be a mesh member). `strategy` names the caller.
absl::Status CheckMeshMembersOnly(LightningModule& module, const std::string& strategy);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_MODEL_PARALLEL_STRATEGY_H_
