#include "lightning/strategies/fsdp_tp_strategy.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "lightning/phase_times.h"
#include "lightning/sharded_module.h"
#include "lightning/strategies/fsdp_buckets.h"
#include "lightning/strategies/fsdp_tp_layout.h"
#include "lightning/strategies/model_parallel_strategy.h"
#include "lightning/strategies/reduce_scatter.h"
#include "lightning/tp/mesh_gradients.h"
#include "lightning/tp/mesh_optimizer.h"
#include "sharded/agreement.h"
#include "sharded/no_throw.h"
#include "sharded/rank_monitor.h"
#include "sharded/sharding_spec.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {
namespace {

using fsdp_internal::Bucket;
using fsdp_internal::FlatParam;
using fsdp_internal::GatherWork;
using fsdp_tp_internal::HeldByFsdpTp;
using sharded::mesh::MeshPlacement;
using sharded::mesh::MeshPtr;
using sharded::mesh::MeshTensor;

class FsdpTpRun : public StrategyRun {
 public:
  // `buckets`: first the trainable members', `trainable` of them, then the frozen ones' (gathered only).
  FsdpTpRun(c10::intrusive_ptr<c10d::ProcessGroup> world, MeshPtr mesh, FsdpOptions options,
            std::deque<sharded::ShardedTensor> chunks, std::vector<Bucket> buckets, size_t trainable,
            tp::MeshParams params)
      : world_(std::move(world)),
        mesh_(std::move(mesh)),
        options_(std::move(options)),
        chunks_(std::move(chunks)),
        buckets_(std::move(buckets)),
        trainable_(trainable),
        params_(std::move(params)) {}

  absl::Status BeforeStep(int64_t step) override {
    step_ = step;
    if (!probed_) {
      if (options_.reduce_scatter) {
        // As fsdp: the flat reduce-scatter where the group has it, else the list one, else allreduce.
        bool listed = false, flat = false;
        SL_ASSIGN_OR_RETURN(listed, ProbeReduceScatter(dp()));
        // Probed in float, the path serves every bucket's dtype: the backends' three paths take the same
        // floating dtypes (ReduceScatterTest.TheFlatProbeAnswersAlikeForEveryFloatingDtype).
        if (listed) {
          SL_ASSIGN_OR_RETURN(flat, ProbeFlatReduceScatter(dp(), at::kFloat));
        }
        path_ = flat ? ReduceScatterPath::kFlat : listed ? ReduceScatterPath::kList : ReduceScatterPath::kAllreduce;
      }
      probed_ = true;
    }
    const PhaseTimes::Scope timed(times_, Phase::kAllGather);
    const std::string op = absl::StrCat("fsdp_tp all-gather at step ", step);
    {
      // A member's gradient between steps is its chunk's (what the optimizer
      // stepped): not the TP piece's this step accumulates and reduces (a
      // validation comes after the optimizer step, without a ZeroGrad). Kept
      // aside for a step without a backward (a validation), which puts it back.
      at::NoGradGuard no_grad;
      kept_grads_.clear();
      for (Bucket& b : buckets_) {
        for (FlatParam& p : b.params) {
          kept_grads_.push_back(p.param.grad());
          p.param.mutable_grad() = at::Tensor();
        }
      }
    }
    if (options_.on_unit_collective) options_.on_unit_collective("all-gather", FsdpTpStrategy::kUnit, step);
    absl::Status gathered = absl::OkStatus();
    for (Bucket& b : buckets_) {
      absl::StatusOr<GatherWork> w = fsdp_internal::IssueGather(dp(), b, false, op);
      if (w.ok()) {
        const absl::StatusOr<bool> flagged = fsdp_internal::FinishGather(dp(), b, *w, op);
        gathered = flagged.status();
        if (gathered.ok() && *flagged) gathered = absl::InternalError(absl::StrCat(op, ": a peer sent a failure flag"));
        if (gathered.ok() && options_.on_all_gather) options_.on_all_gather("", w->input.scalar_type(), w->bytes);
      } else {
        gathered = w.status();
      }
      if (!gathered.ok()) break;
    }
    // A DP group's failed gather must not leave the other groups waiting in the forward's TP collectives.
    gathered = AgreeOverWorld(gathered, op);
    if (!gathered.ok()) Reshard();
    return gathered;
  }

  absl::Status ReduceGradients(const Trainables&, const absl::Status& local, absl::string_view op) override {
    // The verdict over the world first: a TP peer of a failed rank must not
    // wait for it in a DP collective. With it, whether the step had a
    // backward anywhere: a trainable member's TP piece holds a gradient
    // (BeforeStep dropped them all; a validation's forward makes none), so
    // a validation reduce-scatters no zeros, on every rank alike.
    const PhaseTimes::Scope timed(times_, Phase::kReduceScatter);  // the verdict too, as fsdp's rides its reduction
    bool backward = false;
    for (size_t i = 0; i < trainable_; ++i) {
      for (const FlatParam& p : buckets_[i].params) backward = backward || p.param.grad().defined();
    }
    const absl::StatusOr<std::vector<std::string>> agreed =
        sharded::AgreeAndGather(*world_, {local, 0, backward ? "1" : "0"}, {std::string(op)});
    absl::Status reduced = agreed.status();
    const bool any_backward = reduced.ok() && std::find(agreed->begin(), agreed->end(), "1") != agreed->end();
    if (any_backward) {
      if (options_.on_unit_collective) options_.on_unit_collective("reduce-scatter", FsdpTpStrategy::kUnit, step_);
      absl::Status dp_reduced = absl::OkStatus();
      for (size_t i = 0; i < trainable_ && dp_reduced.ok(); ++i) {  // a frozen member's gradient is never reduced
        absl::StatusOr<bool> flagged = fsdp_internal::ReduceBucket(
            dp(), buckets_[i], false, path_, absl::StrCat(op, " (fsdp_tp reduce-scatter)"));
        dp_reduced = flagged.status();
        if (dp_reduced.ok() && *flagged) {
          dp_reduced = absl::InternalError(absl::StrCat(op, ": a failure flag after the verdict"));
        }
      }
      // As the gather: every DP group learns of another's failed reduction here, not in the clipping's allreduce.
      reduced = AgreeOverWorld(dp_reduced, absl::StrCat(op, " (fsdp_tp reduce-scatter)"));
    }
    Reshard();
    // The optimizer steps the members' own variables: each chunk's gradient
    // moves there; without a backward, each keeps the one it had.
    at::NoGradGuard no_grad;
    size_t k = 0;
    for (Bucket& b : buckets_) {
      for (FlatParam& p : b.params) {
        at::Tensor shard = fsdp_internal::LocalShard(p);
        const bool kept = !any_backward && k < kept_grads_.size();
        if (reduced.ok()) p.param.mutable_grad() = kept ? kept_grads_[k] : shard.grad();
        shard.mutable_grad() = at::Tensor();
        ++k;
      }
    }
    kept_grads_.clear();
    return reduced;
  }

  c10d::ProcessGroup& loss_group() override { return dp(); }

  absl::StatusOr<double> ClipGradients(const Trainables&, double max_norm, absl::string_view op) override {
    absl::StatusOr<double> norm = tp::ClipMeshGradNorm(params_, max_norm);
    if (!norm.ok() && !absl::IsInvalidArgument(norm.status())) {
      return absl::UnavailableError(absl::StrCat(op, ": ", norm.status().message()));
    }
    return norm;
  }

  void ClipGradientValues(const Trainables&, double clip_value) override { tp::ClampGradValues(params_, clip_value); }

  void UsePhaseTimes(PhaseTimes* times) override { times_ = times; }

  // Every member back to its chunk, without its full gradient; no pooled buffer kept.
  void Reshard() { fsdp_internal::ReshardAll(buckets_); }

 private:
  c10d::ProcessGroup& dp() { return *mesh_->group(0); }

  // The world's verdict on this rank's DP collective outcome `local` (whose
  // failure message starts "<op> failed: "). A DP peer of a rank that died
  // in the collective sees only c10d's words ("Connection closed by peer"):
  // the DP group has no RankMonitor, and its ranks are not the world's. The
  // world agreement then fails too, and would report this rank as the one
  // that failed ("<op> failed on rank R"), the lost rank only in its
  // parentheses. So when the world's monitor finds a rank gone, this rank's
  // error names it first, as a world collective's would: "<op> failed: rank
  // V is gone (...): <c10d's words>".
  absl::Status AgreeOverWorld(const absl::Status& local, const std::string& op) {
    const absl::Status agreed = sharded::Agree(*world_, local, op);
    if (agreed.ok() || !absl::IsUnavailable(local)) return agreed;  // Unavailable: a failed collective
    const std::shared_ptr<sharded::RankMonitor> monitor = sharded::RankMonitor::Of(*world_);
    const std::string lost = monitor != nullptr ? monitor->Explain() : "";
    if (!absl::StrContains(lost, " gone (")) return agreed;  // no rank gone: the agreed verdict stands
    return absl::UnavailableError(absl::StrCat(op, " failed: ", lost, ": ",
                                               absl::StripPrefix(local.message(), absl::StrCat(op, " failed: "))));
  }

  c10::intrusive_ptr<c10d::ProcessGroup> world_;
  MeshPtr mesh_;  // (DP, TP)
  FsdpOptions options_;
  std::deque<sharded::ShardedTensor> chunks_;  // each member's chunk (the buckets point here)
  std::vector<Bucket> buckets_;
  size_t trainable_;  // the first buckets_, which reduce-scatter gradients
  std::vector<at::Tensor> kept_grads_;  // BeforeStep's members' gradients, in bucket order
  tp::MeshParams params_;
  bool probed_ = false;
  int64_t step_ = 0;  // BeforeStep's, for on_unit_collective's reduce-scatter
  ReduceScatterPath path_ = ReduceScatterPath::kAllreduce;
  PhaseTimes* times_ = nullptr;  // TrainerOptions::phase_times
};

// The mesh checked against the world (local: no collective).
absl::Status CheckMesh(const MeshPtr& mesh, const ShardedContext& ctx) {
  if (mesh == nullptr) {
    return absl::InvalidArgumentError("fsdp_tp needs a 2-d device mesh (data parallel x tensor parallel); got none");
  }
  if (mesh->ndim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fsdp_tp needs a 2-d device mesh (data parallel x tensor parallel), not the ", mesh->ndim(), "-d mesh ",
        mesh->ShapeString()));
  }
  if (mesh->size(0) * mesh->size(1) != ctx.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("fsdp_tp: the mesh ", mesh->ShapeString(), " has ",
                                                   mesh->size(0) * mesh->size(1), " ranks, the world ",
                                                   ctx.world_size));
  }
  if (mesh->rank() != ctx.rank || mesh->world_size() != ctx.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("fsdp_tp: the mesh ", mesh->ShapeString(), " was made for rank ",
                                                   mesh->rank(), " of ", mesh->world_size(), ", not rank ", ctx.rank,
                                                   " of this world's ", ctx.world_size));
  }
  return absl::OkStatus();
}

// The FsdpOptions this strategy does not apply, named.
absl::Status CheckOptions(const FsdpOptions& o) {
  std::string unsupported;
  if (!o.units.empty()) unsupported = "units (the whole model is one gather per dtype)";
  if (o.per_unit) unsupported = "per_unit";
  if (o.param_dtype) unsupported = "param_dtype";
  if (o.reduce_dtype) unsupported = "reduce_dtype";
  if (o.on_unit_forward) unsupported = "on_unit_forward";
  if (unsupported.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "fsdp_tp gathers the whole model for the step in the parameters' own dtype: FsdpOptions::", unsupported,
      " is not supported with it yet (use fsdp or hsdp for per-unit gathering and mixed precision)"));
}

// This rank's chunk of `piece` (its TP piece) over the DP group, as a
// ShardedTensor on that group (no communication). `held`: `piece` is the
// chunk already (an earlier fsdp_tp Fit laid it out) and `sizes` the TP
// piece's. `trainable`: whether the chunk requires grad.
absl::StatusOr<sharded::ShardedTensor> ChunkOf(const at::Tensor& piece, const std::vector<int64_t>& sizes, bool held,
                                               bool trainable, const c10::intrusive_ptr<c10d::ProcessGroup>& dp) {
  sharded::TensorProperties properties;
  properties.dtype = piece.scalar_type();
  properties.requires_grad = trainable;
  SL_ASSIGN_OR_RETURN(
      sharded::ShardedTensorMetadata metadata,
      sharded::BuildMetadata(sharded::ChunkShardingSpec::OnRanks(0, dp->getSize()), sizes, properties, dp->getSize()));
  std::vector<sharded::Shard> local = sharded::AllocateLocalShards(metadata, dp->getRank());
  {
    at::NoGradGuard no_grad;
    const sharded::ShardMetadata& m = local.front().metadata;
    local.front().tensor.copy_(held ? piece.detach() : piece.detach().narrow(0, m.offsets[0], m.sizes[0]));
  }
  local.front().tensor.set_requires_grad(trainable);
  return sharded::ShardedTensor::InitFromLocalShardsAndGlobalMetadata(std::move(local), std::move(metadata), dp);
}

}  // namespace

absl::StatusOr<std::unique_ptr<StrategyRun>> FsdpTpStrategy::Setup(LightningModule& module,
                                                                  const ShardedContext& ctx) const {
  SL_RETURN_IF_ERROR(CheckMesh(mesh_, ctx));
  SL_RETURN_IF_ERROR(CheckOptions(options_));
  SL_RETURN_IF_ERROR(CheckMeshMembersOnly(module, name()));
  SL_ASSIGN_OR_RETURN(const MeshPtr layout, mesh_->Permuted({1, 0}));
  // The view object is what marks a member held (fsdp_tp_layout.h); forgotten when no member is described on it.
  fsdp_tp_internal::RegisterLayout(layout);
  const c10::intrusive_ptr<c10d::ProcessGroup>& dp = mesh_->group(0);
  // What this Fit lays out: every trainable member, and every member an
  // earlier Fit left chunked, trainable now or not (the step needs its whole
  // TP piece; only the trainable ones' gradients are reduce-scattered).
  // Frozen members never chunked stay whole, as model_parallel keeps them.
  struct Member {
    std::string key;
    MeshTensor* tensor;
    bool held;       // chunked by an earlier fsdp_tp Fit
    bool trainable;  // requires grad now
  };
  std::vector<Member> members;
  for (const auto& [key, member] : MeshMembers(module, "")) {
    const bool trainable = member->local().requires_grad();
    const bool held = HeldByFsdpTp(*member);
    if (trainable || held) members.push_back({key, member, held, trainable});
  }
  // Checked before anything changes: a bad member leaves the module as it was.
  std::set<const c10::TensorImpl*> seen;
  for (const Member& m : members) {
    const MeshTensor& member = *m.tensor;
    if (!seen.insert(member.local().unsafeGetTensorImpl()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fsdp_tp: the mesh member '", m.key,
          "' is reachable under another key too (shared members are not supported)"));
    }
    if (member.sizes().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("fsdp_tp shards dim 0: the mesh member '", m.key, "' has no dims"));
    }
    for (const MeshPlacement& placement : member.placements()) {
      if (placement.is_partial()) {
        return absl::InvalidArgumentError(absl::StrCat("fsdp_tp: the mesh member '", m.key, "' is laid out ",
                                                       sharded::mesh::PlacementsString(member.placements()),
                                                       ": a Partial placement is not a parameter's layout"));
      }
    }
    if (m.held) {
      if (member.mesh()->group(0).get() != mesh_->group(1).get() || member.mesh()->group(1).get() != dp.get()) {
        return absl::FailedPreconditionError(absl::StrCat("fsdp_tp: the mesh member '", m.key,
                                                          "' is laid out by an earlier Fit on another mesh; fit a "
                                                          "fresh module (resume its state from a checkpoint)"));
      }
    } else if (member.mesh().get() != mesh_.get() || !member.placements()[0].is_replicate()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fsdp_tp: the mesh member '", m.key, "' is laid out ", sharded::mesh::PlacementsString(member.placements()),
          " on the mesh '", member.mesh()->name(), "' (", member.mesh()->ShapeString(),
          "), not on this strategy's mesh '",
          mesh_->name(), "' (", mesh_->ShapeString(), ") replicated over its data-parallel dim 0"));
    }
  }
  std::deque<sharded::ShardedTensor> chunks;
  // One bucket per dtype, the trainable members' apart from the frozen ones' (false sorts first).
  std::map<std::pair<bool, c10::ScalarType>, Bucket> by_kind;
  for (const Member& m : members) {
    MeshTensor& member = *m.tensor;
    const MeshPlacement tp_placement = m.held ? member.placements()[0] : member.placements()[1];
    // The TP piece's sizes: this rank's box under the mesh's TP placement alone.
    const sharded::Box piece = sharded::mesh::MeshLocalBox(
        mesh_->shape(), mesh_->coords(), {MeshPlacement::Replicate(), tp_placement}, member.sizes());
    const std::vector<int64_t> piece_sizes(piece.sizes.begin(), piece.sizes.end());
    at::Tensor variable = member.local();
    SL_ASSIGN_OR_RETURN(sharded::ShardedTensor chunk, ChunkOf(variable, piece_sizes, m.held, m.trainable, dp));
    chunks.push_back(std::move(chunk));
    FlatParam p;
    p.param = variable;
    p.shard = &chunks.back();
    p.sizes = piece_sizes;
    p.rows = sharded::ChunkRanges(piece_sizes[0], dp->getSize());
    for (size_t d = 1; d < piece_sizes.size(); ++d) p.row_numel *= piece_sizes[d];
    int64_t chunk_rows = 0;
    for (const auto& [first, rows] : p.rows) chunk_rows = std::max(chunk_rows, rows);
    const c10::ScalarType dtype = variable.scalar_type();
    Bucket& b =
        by_kind.try_emplace({!m.trainable, dtype}, Bucket{0, dtype, {}, 0, dtype, dtype, nullptr}).first->second;
    p.offset = b.slot_numel;
    b.slot_numel += chunk_rows * p.row_numel;
    {
      at::NoGradGuard no_grad;
      variable.set_data(fsdp_internal::LocalShard(p));
    }
    SL_ASSIGN_OR_RETURN(member, MeshTensor::FromLocalAgreed(variable, layout, {tp_placement, MeshPlacement::Shard(0)},
                                                            member.sizes()));
    b.params.push_back(std::move(p));
  }
  std::vector<Bucket> buckets;
  size_t trainable = 0;
  const auto pool = options_.buffer_pool ? std::make_shared<fsdp_internal::BufferPool>() : nullptr;
  for (auto& [kind, b] : by_kind) {
    if (!kind.first) ++trainable;
    b.pool = pool;
    buckets.push_back(std::move(b));
  }
  auto run = std::make_unique<FsdpTpRun>(ctx.pg, mesh_, options_, std::move(chunks), std::move(buckets), trainable,
                                         tp::TrainableMeshMembers(module));
  run->Reshard();  // between steps each member is its chunk
  return std::unique_ptr<StrategyRun>(std::move(run));
}

absl::Status WithTensorParallelPieces(torch::nn::Module& module, const std::function<absl::Status()>& fn) {
  std::vector<std::pair<at::Tensor, at::Tensor>> restore;  // (the member's variable, its chunk)
  absl::Status gathered = absl::OkStatus();
  at::AutoGradMode no_grad_while_gathering(false);
  for (const auto& [key, member] : MeshMembers(module, "")) {  // frozen ones too: each is held as a chunk
    if (!HeldByFsdpTp(*member)) continue;
    absl::StatusOr<MeshTensor> piece = member->Redistribute({member->placements()[0], MeshPlacement::Replicate()});
    if (!piece.ok()) {
      gathered = absl::UnavailableError(absl::StrCat("fsdp_tp: gathering '", key, "': ", piece.status().message()));
      break;
    }
    at::Tensor variable = member->local();
    restore.emplace_back(variable, variable.data());
    variable.set_data(piece->local().detach());
  }
  absl::Status status = gathered;
  if (status.ok()) {
    at::AutoGradMode caller_mode(no_grad_while_gathering.prev_mode);
    status = sharded::NoThrow(fn);  // a throwing fn must not leave the members described as chunks but whole
  }
  for (auto& [variable, chunk] : restore) variable.set_data(chunk);
  return status;
}

}  // namespace shardlight::lightning
