// FsdpTpStrategy: fully sharded data parallel over tensor parallelism (2-d
// FSDP x TP), as PyTorch composes fully_shard over parallelize_module and as
// Lightning's ModelParallelStrategy does with a data-parallel dim that
// shards. The mesh is (DP, TP), as ModelParallelStrategy's: the Trainer hands
// it to the module's ConfigureShardedModel, which builds its tensor-parallel
// layers from it (//lightning/tp: mesh members placed Replicate on DP and
// Shard(d) or Replicate on TP). Setup then shards each member again over the
// DP ranks.
//
// Layout. Between steps a member holds only its DP chunk of its TP piece:
// the TP piece split on dim 0 as torch.chunk splits it over the DP group
// (uneven and empty chunks allowed), FSDP2's layout for a DTensor parameter
// (its "strided" shard: TP first, then DP). The member is re-described on a
// permuted view of the mesh, (TP, DP), with placements [its TP placement,
// Shard(0)], so mesh tensors' nesting order says exactly that (that view
// object, registered by Setup, is what marks a member held by fsdp_tp:
// fsdp_tp_layout.h; a mesh's name plays no part); its local()
// stays the same variable (the layers read it), its data the chunk. So the
// optimizer built after Setup (tp::MeshAdamWOptimizer) steps the chunks and
// keeps moments of their size, and a checkpoint (the members' and moments'
// checkpoint views, keys unchanged) holds each chunk once: it resumes under
// model_parallel, fsdp, ddp or fsdp_tp on any mesh, and theirs here.
//
// A step. BeforeStep drops each member's gradient (its chunk's, which the
// optimizer stepped), all-gathers every member's chunks within its DP group
// (one collective per dtype, each rank's chunk padded to the largest) and
// sets each member's local() to its TP piece; the forward and backward are
// the module's tensor-parallel ones. ReduceGradients agrees the step's
// verdict over the world first (a TP peer of a failed rank must not wait in
// a DP collective), with whether any rank's step had a backward (a trainable
// member's piece holds a gradient); if one did, it reduce-scatters the
// trainable TP pieces' gradients within the DP group (sums: the module's
// loss is its share of the global mean, FSDP2 with gradient divide factor
// 1), and sets each member back to its chunk with its gradient chunk. A step
// without a backward (a validation) reduces nothing: each member goes back
// to its chunk with the gradient it had before the step. A DP group whose gather or reduce-scatter fails
// (a dead peer) fails every rank there, agreed over the world, rather than
// leaving the other groups in their next collective until its timeout.
// Clipping takes the norm over every piece once
// (tp::ClipMeshGradNorm). The loss is summed over the DP group. Memory in the
// step: the whole TP piece of the model (FsdpOptions::per_unit is not
// supported here yet); between steps 1/(DP*TP) of it, and of AdamW's moments.
//
// Frozen members. Setup chunks the trainable members (requires_grad), and
// keeps chunked every member an earlier fsdp_tp Fit chunked, trainable now
// or not: each is gathered for the step (and by WithTensorParallelPieces),
// in buckets apart from the trainable ones', and never reduce-scattered (it
// gets no gradient). A member frozen before the first Fit stays whole,
// replicated over DP, as under model_parallel. model_parallel refuses a
// module with members fsdp_tp holds chunked (model_parallel_strategy.h).
//
// Errors, from Setup (local, so the Trainer agrees them on every rank before
// any collective): InvalidArgument for a null mesh, one that is not 2-d,
// whose size is not the world's or that was made for another rank; for a
// trainable dense parameter or ShardedTensor member, a member not replicated
// over DP or with a Partial placement, a 0-dim member or one member
// reachable under two keys (named);
// for FsdpOptions this strategy does not support (units, per_unit,
// param_dtype, reduce_dtype and on_unit_forward: named).
// FailedPrecondition when the module's parameters are held sharded by an
// earlier fsdp Fit, or a member (named) is held chunked by an earlier
// fsdp_tp Fit on another mesh. A second Fit on the same mesh keeps the
// layout the first made, frozen members included. A step failing on any
// rank (a validation's too) fails every rank with that rank's error.
//
// Precondition: every rank's members hold the values of one model (the TP
// layers build them from the seed by global index).
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_TP_STRATEGY_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_TP_STRATEGY_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "lightning/strategies/fsdp_strategy.h"
#include "sharded/mesh/device_mesh.h"

namespace shardlight::lightning {

class FsdpTpStrategy : public Strategy {
 public:
  // `mesh`: (DP, TP), this rank's (sharded::mesh::DeviceMesh::Create), so
  // each rank has its own instance. Of `options`, reduce_scatter,
  // on_all_gather and on_unit_collective apply; the last names the unit
  // kUnit and is called once per step for each of its two collectives: the
  // all-gather as BeforeStep enters it (a validation's too), the
  // reduce-scatter as ReduceGradients enters it after an OK verdict of a
  // step with a backward (not a validation's).
  explicit FsdpTpStrategy(sharded::mesh::MeshPtr mesh, FsdpOptions options = {})
      : mesh_(std::move(mesh)), options_(std::move(options)) {}
  // The one FSDP unit fsdp_tp has, as FsdpOptions::on_unit_collective names
  // it: the whole model, gathered and reduced once per step.
  static constexpr char kUnit[] = "model";

  std::string name() const override { return "fsdp_tp"; }
  sharded::mesh::MeshPtr mesh() const override { return mesh_; }
  absl::StatusOr<std::unique_ptr<StrategyRun>> Setup(LightningModule& module,
                                                     const ShardedContext& ctx) const override;

 private:
  sharded::mesh::MeshPtr mesh_;
  FsdpOptions options_;
};

// Collective over the world of the members' mesh: runs `fn` with every mesh
// member of `module` that fsdp_tp holds chunked (between steps; trainable
// or frozen) set to its whole TP piece -- for evaluation or export after a
// Fit -- then sets each
// back to its chunk, also when `fn` fails or throws. Members of other
// layouts are left alone. The gathers' error (Unavailable, naming the
// member) before `fn` runs; else fn's (a thrown exception as Internal).
absl::Status WithTensorParallelPieces(torch::nn::Module& module, const std::function<absl::Status()>& fn);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_TP_STRATEGY_H_
