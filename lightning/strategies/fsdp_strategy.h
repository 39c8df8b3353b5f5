// FsdpStrategy: fully sharded data parallel (ZeRO-3), PyTorch FSDP2's
// fully_shard in the Trainer's loop. Every rank runs the whole model on its
// own data, as with ddp; what differs is what a rank keeps between steps.
//
// Layout. Each dense parameter P with requires_grad and at least one dim
// lives, between steps, as only this rank's dim-0 chunk, torch.chunk's split
// over the group (uneven and empty chunks allowed: a dim 0 of 3 on 4 ranks
// leaves rank 3 a [0, ...] shard). The registered variable stays: Setup swaps
// its data for the chunk (set_data), so the user's forward and autograd use
// the module as written, and the chunk is also a sharded::ShardedTensor
// (ChunkShardingSpec dim 0) that the root module holds in P's place
// (ShardedModule::HoldParameterSharded). Why there: the three things that
// must see sharded state already read the module -- TrainablesOf lists the
// shard instead of P (so Sgd's momentum is ZerosLike of it, sharded), the
// LightningModule's state-dict hook puts the ShardedTensor under P's key
// (keys unchanged: a ddp checkpoint resumes under fsdp and back, on any world
// size, through the checkpoint's resharding), and its load pre-hook loads
// into it. Nothing in the optimizers, the checkpoint or the Trainer knows
// FSDP exists. Parameters without requires_grad, and 0-dim ones, stay dense
// on every rank (their gradients, if any, are summed as ddp's).
//
// A step. BeforeStep all-gathers every unit's shards (one collective per unit
// and dtype, each rank's chunk padded to the largest so the ranks send equal
// sizes) and sets each P to its full tensor; after backward, ReduceGradients
// reduce-scatters each unit's full gradients (one collective per unit and
// dtype; reduce_scatter.h: c10d's reduce_scatter where the backend has it,
// else allreduce + narrow), gives each shard its gradient chunk, and sets P
// back to its shard, dropping the full tensors and gradients. The first of
// these reductions carries the step's verdict, so one rank's failing
// TrainingStep fails every rank with its error and no rank waits.
//
// Units (FsdpOptions::units, fsdp_units.h) group the parameters into those
// collectives as fully_shard applied bottom-up does; the root holds what no
// unit claims. By default every unit is gathered at the start of the step
// and resharded after backward (memory in the step is the whole model, as
// ddp; between steps 1/W).
//
// Per-unit gathering (FsdpOptions::per_unit: ZeRO-3 inside the step, as
// fully_shard does). The module's forward runs each unit through
// RunFsdpUnit (fsdp_unit.h: LibTorch C++ has no module forward hooks; the
// call is a plain forward under any other strategy). BeforeStep gathers only
// the root. Entering a unit all-gathers its parameters (with prefetch the
// next unit's all-gather is issued, asynchronously, once this one's arrived,
// so it overlaps this unit's compute); leaving it frees them
// (reshard_after_forward; the root stays gathered). A hook on the unit's
// output gathers them again when the output's gradient arrives (prefetching
// the previous unit's), and a post hook on each parameter's AccumulateGrad
// reduce-scatters the unit's gradients once all have accumulated, adding
// each rank's chunk to its shard's gradient and freeing the full ones. A
// full parameter keeps one storage for the Fit, freed and allocated again
// in place, so the views autograd saved in the forward see the gathered
// values in the backward and hold no memory in between. ReduceGradients
// reduce-scatters the root and sums dense gradients. At most the root and
// two units are unsharded at once (one without prefetch).
//
// Mixed precision (FsdpOptions::param_dtype, reduce_dtype; FSDP2's
// MixedPrecisionPolicy). The shard stays in the parameter's own dtype (the
// master copy the optimizer steps: no second copy). Each rank casts its
// chunk to param_dtype before the all-gather, so the all-gather moves
// param_dtype (its bytes, viewed as uint8: a gather is a copy, so no backend
// needs collectives of that dtype) and the full parameter, the forward and
// the backward are in param_dtype. The full gradients are cast to
// reduce_dtype before the reduce-scatter, summed in it (no divide: the
// module's loss is its share of the global mean, FSDP2 with gradient divide
// factor 1), and the summed chunk is cast to the shard's dtype and added to
// its gradient. What FSDP2 does beyond that, and here: buffers and the
// parameters that stay dense (no requires_grad, 0-dim) are not cast; the
// forward's floating inputs are not cast either (FSDP2's
// cast_forward_inputs is a forward pre-hook, which LibTorch C++ lacks): a
// module casts them to its parameters' dtype itself (integer inputs, token
// ids, need nothing); outputs keep the dtype the compute gives (FSDP2's
// output_dtype unset). fsdp_precision.h checks the policy: Setup refuses a
// param_dtype the build cannot compute in (a probe: matmul and its
// backward) and a non-floating dtype; the first step's probe refuses a
// reduce_dtype the group cannot sum; CheckPrecision refuses a Trainer
// precision that contradicts it. All on every rank before any collective of
// the step.
//
// Failure inside the step. The unit collectives run inside the user's
// TrainingStep and backward, so a rank whose TrainingStep fails before a
// unit's forward would leave its peers in that unit's all-gather. So every
// unit collective carries a failure flag (one extra element), and the order
// of one micro-batch's collectives is a list every rank walks alike
// (fsdp_schedule.h): a tiny boundary allreduce at each micro-batch's start
// and at ReduceGradients, the forward's all-gathers, the backward's
// all-gathers and reduce-scatters. A rank whose step failed walks the rest
// of the list with its flag set; every rank stops at the first flagged
// collective it waits on, and ReduceGradients agrees the verdict: every rank
// returns "<op> failed on rank R: <R's error>". A rank whose forward
// deviates from the list (a unit skipped, entered twice or out of
// FsdpOptions::units order, a unit parameter without a gradient) fails the
// same way, naming the unit.
//
// Setup errors (agreed by the Trainer, on every rank, before any collective):
// FailedPrecondition when the build lacks ShardedTensor support (the module
// registered no hooks), when the module is held sharded on another group by
// an earlier Fit, or its held layout differs from this plan; InvalidArgument
// for a bad unit list (fsdp_units.h).
//
// Hybrid sharding (HSDP: FsdpStrategy::Hybrid, FSDP2's fully_shard with a
// 2-d mesh). The world is a (replicate R, shard S) mesh: each parameter is
// sharded as above over the S ranks of this rank's shard group (mesh dim 1)
// and the same shards are replicated on the R shard groups (mesh dim 0).
// All-gathers run within the shard group; each unit's gradients are
// reduce-scattered within it and the summed chunk is then all-reduced over
// the replicate group (FSDP2's foreach_reduce: reduce_scatter, then
// all_reduce over the replicate group; both sums, no divide), in
// reduce_dtype. Dense gradients, the loss and the step's boundaries and
// verdict span the whole world. The held ShardedTensors live on the shard
// group (keys unchanged). A flag in a unit's all-gather stops only its
// shard group; that group then joins the others at the next collective they
// share (the replicate allreduce of the next reduce-scatter in the schedule,
// which carries the flag, or the next boundary), so every rank stops at the
// same collective. Clipping sums the sharded part of the norm over the shard
// group. Setup's InvalidArgument (on every rank, before any collective): a
// null mesh, a mesh that is not 2-d, whose size is not the world's, or that
// is another world's (its rank differs from this rank). (R, S) = (1, W) is
// fsdp; (W, 1) is ddp with sharded bookkeeping.
//
// Precondition: at Setup every rank's module holds the same values (as ddp
// assumes: build them from the seed). Each rank keeps its chunk of its own.
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_STRATEGY_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_STRATEGY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lightning/strategies/strategy.h"
#include "sharded/mesh/device_mesh.h"

namespace shardlight::lightning {

struct FsdpOptions {
  // Submodules (dotted paths from the root: "blocks.0") that are units.
  std::vector<std::string> units;
  // Use c10d's reduce_scatter where a probe at the first step finds it works;
  // false: always allreduce + narrow.
  bool reduce_scatter = true;
  // ZeRO-3 inside the step (see "Per-unit gathering" above): each named unit
  // is gathered only around its forward and backward, which the module's
  // forward marks with RunFsdpUnit (fsdp_unit.h). false: every unit is
  // gathered for the whole step.
  bool per_unit = false;
  // Per-unit: free a unit's full parameters after its forward and gather
  // them again for its backward (FSDP2's default); false keeps them from the
  // forward to the end of the unit's backward. The root is never resharded
  // after forward.
  bool reshard_after_forward = true;
  // Per-unit: issue the next unit's all-gather (forward order, then backward
  // order) before the current unit computes.
  bool prefetch = true;
  // Take the transient CPU buffers (gathered slots and full parameters, the
  // flat gradients) from one pool of mapped blocks reused across units and
  // steps (fsdp_buffer_pool.h; no heap fragmentation); false: LibTorch's
  // allocator (malloc), as before. Parameters on a GPU never use the pool.
  bool buffer_pool = true;
  // Per-unit, for tests and memory tools: called on entering each unit's
  // forward, once its parameters are gathered, with the unit's name and the
  // bytes of full (unsharded) parameter storage this rank holds then.
  std::function<void(const std::string& unit, int64_t unsharded_bytes)> on_unit_forward;
  // Mixed precision, as FSDP2's MixedPrecisionPolicy(param_dtype,
  // reduce_dtype) (see "Mixed precision" above). Unset: the parameter's own
  // dtype (no cast anywhere: the run is bit for bit the one without them).
  std::optional<c10::ScalarType> param_dtype;
  std::optional<c10::ScalarType> reduce_dtype;
  // For tests and tools: called after each all-gather with the unit's name,
  // the dtype its elements travelled in and the bytes this rank received.
  std::function<void(const std::string& unit, c10::ScalarType dtype, int64_t bytes)> on_all_gather;
  // Per-unit, for tests and fault tools (a fault at an exact point of the
  // schedule): called on this rank's thread as it enters a named unit's
  // collective -- "all-gather" (forward and backward; with prefetch where it
  // is issued) or "reduce-scatter" -- before issuing it, with the unit's name
  // and the step (0-based, BeforeStep's). Not for the root's collectives, nor
  // on a rank walking the rest of a step that stopped.
  std::function<void(const std::string& collective, const std::string& unit, int64_t step)> on_unit_collective;
};

class FsdpStrategy : public Strategy {
 public:
  explicit FsdpStrategy(FsdpOptions options = {}) : options_(std::move(options)) {}
  // HSDP (see "Hybrid sharding" above): shards over dim 1 of this rank's
  // 2-d (replicate, shard) mesh, replicas over dim 0. Each rank has its own
  // instance (the caller makes the mesh: sharded::mesh::DeviceMesh::Create).
  // A null or ill-shaped mesh is Setup's InvalidArgument.
  static FsdpStrategy Hybrid(sharded::mesh::MeshPtr mesh, FsdpOptions options = {}) {
    FsdpStrategy s(std::move(options));
    s.hybrid_ = true;
    s.hsdp_mesh_ = std::move(mesh);
    return s;
  }
  std::string name() const override { return hybrid_ ? "hsdp" : "fsdp"; }
  absl::StatusOr<std::unique_ptr<StrategyRun>> Setup(LightningModule& module,
                                                     const ShardedContext& ctx) const override;
  // A policy with a Trainer precision that chooses another compute dtype:
  // InvalidArgument (fsdp_precision.h, CheckPolicyWithPrecision).
  absl::Status CheckPrecision(const std::string& precision) const override;
  const FsdpOptions& options() const { return options_; }
  bool hybrid() const { return hybrid_; }
  // HSDP's mesh. Not Strategy::mesh(): the module is laid out densely, as
  // under fsdp, not on a mesh.
  const sharded::mesh::MeshPtr& hsdp_mesh() const { return hsdp_mesh_; }

 private:
  FsdpOptions options_;
  bool hybrid_ = false;
  sharded::mesh::MeshPtr hsdp_mesh_;
};

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_STRATEGY_H_
