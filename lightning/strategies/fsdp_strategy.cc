#include "lightning/strategies/fsdp_strategy.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lightning/deferred_init.h"
#include "lightning/phase_times.h"
#include "lightning/strategies/fsdp_buckets.h"
#include "lightning/strategies/fsdp_precision.h"
#include "lightning/strategies/fsdp_schedule.h"
#include "lightning/strategies/fsdp_unit.h"
#include "lightning/strategies/fsdp_units.h"
#include "lightning/strategies/gradient_reduction.h"
#include "lightning/strategies/hsdp_checkpoint.h"
#include "lightning/strategies/reduce_scatter.h"
#include "sharded/agreement.h"
#include "sharded/collectives.h"
#include "sharded/sharding_spec.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {
namespace {

using fsdp_internal::Bucket;
using fsdp_internal::FlatParam;
using fsdp_internal::GatherWork;
using Event = FsdpEvent;

std::string UnitName(const std::string& unit) { return unit.empty() ? "the root" : absl::StrCat("\"", unit, "\""); }

struct Unit {
  std::string name;
  torch::nn::Module* module;
  std::vector<size_t> buckets;
  int params = 0;
};

// What RunFsdpUnit's callers see when the step stops: another rank failed
// (the Trainer reports that rank's error) or a collective failed.
class StepStopped : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class FsdpRun : public StrategyRun, public fsdp_internal::UnitHooks {
 public:
  // `pg`: the group the shards live on (the world, or HSDP's shard group);
  // `replicate`: HSDP's replicate group, else null.
  FsdpRun(c10::intrusive_ptr<c10d::ProcessGroup> world, c10::intrusive_ptr<c10d::ProcessGroup> pg,
          sharded::mesh::MeshPtr mesh, const FsdpOptions& options, std::vector<Bucket> buckets,
          std::vector<Unit> units)
      : world_(std::move(world)),
        pg_(std::move(pg)),
        mesh_(std::move(mesh)),
        replicate_(mesh_ != nullptr ? mesh_->group(0) : c10::intrusive_ptr<c10d::ProcessGroup>()),
        options_(options),
        buckets_(std::move(buckets)),
        units_(std::move(units)) {
    per_unit_ = options_.per_unit && units_.size() > 1;
    if (per_unit_) {
      for (size_t u = 0; u + 1 < units_.size(); ++u) {
        fsdp_internal::RegisterUnit(units_[u].module, this, static_cast<int>(u));
        names_.push_back(units_[u].name);
        reshard_.push_back(options_.reshard_after_forward);
      }
    }
  }
  ~FsdpRun() override { fsdp_internal::UnregisterUnits(this); }

  absl::Status BeforeStep(int64_t step) override {
    if (!probed_) {
      if (options_.reduce_scatter) {
        SL_ASSIGN_OR_RETURN(reduce_scatter_, ProbeReduceScatter(*pg_));
        // The flat reduce-scatter where the group has it for the dtype the
        // gradients are summed in (a reduce_dtype policy's, else float: the
        // same path as without a policy, so an own-dtype policy is bit-equal).
        bool flat = false;
        if (reduce_scatter_) {
          SL_ASSIGN_OR_RETURN(flat, ProbeFlatReduceScatter(*pg_, options_.reduce_dtype.value_or(at::kFloat)));
        }
        path_ = flat ? ReduceScatterPath::kFlat : reduce_scatter_ ? ReduceScatterPath::kList : ReduceScatterPath::kAllreduce;
      }
      // A reduce_dtype the group cannot sum fails here, on every rank, before any unit collective.
      if (options_.reduce_dtype) {
        absl::Status probed = ProbeReduceDtype(*pg_, *options_.reduce_dtype, reduce_scatter_);
        if (replicate_ != nullptr) {
          // HSDP: every rank probes both groups, then the world agrees (a
          // shard group that failed alone must not leave the others waiting).
          const absl::Status replicated = ProbeReduceDtype(*replicate_, *options_.reduce_dtype, false);
          SL_RETURN_IF_ERROR(sharded::Agree(*world_, probed.ok() ? replicated : probed, "hsdp reduce_dtype probe"));
        }
        SL_RETURN_IF_ERROR(probed);
      }
      probed_ = true;
    }
    step_ = step;
    events_.clear();
    cursor_ = 0;
    absl::Status gathered = absl::OkStatus();
    for (size_t u = per_unit_ ? units_.size() - 1 : 0; u < units_.size() && gathered.ok(); ++u) {
      gathered = GatherNow(u);
    }
    if (!gathered.ok()) Reshard();
    return gathered;
  }

  absl::Status ReduceGradients(const Trainables& trainables, const absl::Status& local,
                               absl::string_view op) override {
    absl::Status reduced = per_unit_ ? ReducePerUnit(trainables, local, op) : ReduceWholeModel(trainables, local, op);
    Reshard();
    return reduced;
  }

  c10d::ProcessGroup& loss_group() override { return *world_; }

  void UsePhaseTimes(PhaseTimes* times) override { times_ = times; }

  // HSDP: a shard's gradient is the same on each replica, so the sharded
  // part of the norm sums over the shard group only.
  absl::StatusOr<double> ClipGradients(const Trainables& trainables, double max_norm, absl::string_view op) override {
    return ClipGradientNorm(trainables, *pg_, max_norm, op);
  }

  // Every parameter back to its shard, without its full gradient; the
  // buffer pool's blocks back to the system (none held between steps).
  void Reshard() { fsdp_internal::ReshardAll(buckets_); }

  // HSDP: the shards (model and optimizer state, on the shard group) as
  // their checkpoint views (hsdp_checkpoint.h).
  absl::Status UseCheckpointViews(sharded::StateDict& dict) override {
    replicated_.clear();
    if (mesh_ == nullptr) return absl::OkStatus();
    return UseHsdpCheckpointViews(dict, *mesh_, &replicated_);
  }

  absl::Status CompleteCheckpointLoad(absl::string_view op) override {
    for (const sharded::ShardedTensor& st : replicated_) {
      SL_RETURN_IF_ERROR(fsdp_internal::FillReplicas(st, *mesh_, absl::StrCat(op, " (hsdp replicas)")));
    }
    replicated_.clear();
    return absl::OkStatus();
  }

  // fsdp_internal::UnitHooks: the module's forward and autograd reach the run.
  void EnterForward(int unit) override {
    if (!InMicroBatch() && unit == 0) {
      events_ = MicroBatchEvents(reshard_, at::GradMode::is_enabled(), options_.prefetch);
      cursor_ = 0;
    }
    Arrive({Event::Kind::kPoint, Event::Point::kEnter, Event::Op::kBoundary, unit});
    grads_pending_[unit] = units_[unit].params;
    if (options_.on_unit_forward) {
      int64_t bytes = 0;
      for (const Bucket& b : buckets_) bytes += fsdp_internal::FullBytes(b);
      options_.on_unit_forward(units_[unit].name, bytes);
    }
  }

  void ExitForward(int unit) override {
    if (!stopped_ && reshard_[unit]) ReshardUnit(unit);
  }

  void BeforeBackward(int unit) override {
    Arrive({Event::Kind::kPoint, Event::Point::kBackward, Event::Op::kBoundary, unit});
  }

  void GradAccumulated(int unit) override {
    if (stopped_ || --grads_pending_[unit] > 0) return;
    Arrive({Event::Kind::kPoint, Event::Point::kGradsDone, Event::Op::kBoundary, unit});
  }

 private:
  bool InMicroBatch() const { return cursor_ < events_.size(); }

  std::string OpName(const Event& e) const {
    return absl::StrCat("fsdp ", DescribeEvent(e, names_), " at step ", step_);
  }

  absl::Status GatherNow(size_t unit) {
    const PhaseTimes::Scope timed(times_, Phase::kAllGather);
    for (size_t i : units_[unit].buckets) {
      const std::string op = absl::StrCat("fsdp all-gather of unit ", UnitName(units_[unit].name), " at step ", step_);
      SL_ASSIGN_OR_RETURN(GatherWork w, fsdp_internal::IssueGather(*pg_, buckets_[i], false, op));
      SL_RETURN_IF_ERROR(fsdp_internal::FinishGather(*pg_, buckets_[i], w, op).status());
      ReportGather(unit, w);
    }
    return absl::OkStatus();
  }

  void ReportGather(size_t unit, const GatherWork& w) const {
    if (options_.on_all_gather) options_.on_all_gather(units_[unit].name, w.input.scalar_type(), w.bytes);
  }

  void ReshardUnit(int unit) {
    for (size_t i : units_[unit].buckets) fsdp_internal::ReshardBucket(buckets_[i]);
  }

  // The module reached `point`: it must be the next event; then the
  // collectives up to the next point run. Throws StepStopped when the step
  // stops (a flag, a deviation of this rank, a failed collective).
  void Arrive(const Event& point) {
    if (stopped_) throw StepStopped(absl::StrCat("fsdp: the step stopped before ", DescribeEvent(point, names_)));
    if (!InMicroBatch() || !(events_[cursor_] == point)) {
      own_error_ = absl::FailedPreconditionError(absl::StrCat(
          "fsdp: the module reached ", DescribeEvent(point, names_), " where ",
          InMicroBatch() ? DescribeEvent(events_[cursor_], names_) : DescribeEvent({Event::Kind::kPoint, Event::Point::kEnter, Event::Op::kBoundary, 0}, names_),
          " was due (per-unit fsdp needs every rank's forward to enter each unit once, in FsdpOptions::units "
          "order, and every unit parameter to get a gradient)"));
      Join();
      throw StepStopped(own_error_.ToString());
    }
    ++cursor_;
    while (InMicroBatch() && events_[cursor_].kind != Event::Kind::kPoint) {
      const Event e = events_[cursor_++];
      if (!Execute(e, false, cursor_ - 1)) throw StepStopped(absl::StrCat("fsdp: the step stopped at ", OpName(e)));
    }
  }

  // This rank failed: the rest of the schedule with the flag set, until the
  // first flagged collective it waits on (where every rank stops).
  void Join() {
    const size_t first = std::min(cursor_, events_.size());
    std::vector<Event> rest(events_.begin() + static_cast<std::ptrdiff_t>(first), events_.end());
    if (rest.empty()) {
      rest = {{Event::Kind::kIssue, Event::Point::kEnter, Event::Op::kBoundary, 0},
              {Event::Kind::kWait, Event::Point::kEnter, Event::Op::kBoundary, 0}};
    }
    // A rest of only waits (this rank had issued them) ends where its peers
    // go on to the next boundary: it joins them there.
    for (size_t k = 0; k < rest.size(); ++k) {
      if (rest[k].kind == Event::Kind::kPoint) continue;
      if (!Execute(rest[k], true, first + k)) break;
    }
    if (!stopped_ && Execute({Event::Kind::kIssue, Event::Point::kEnter, Event::Op::kBoundary, 0}, true)) {
      Execute({Event::Kind::kWait, Event::Point::kEnter, Event::Op::kBoundary, 0}, true);
    }
    if (!stopped_) Stop();
    events_.clear();
    cursor_ = 0;
  }

  // One collective event (events_[at], or one outside the list); false when
  // the step stopped there (a flag seen, or the collective failed: broken_).
  bool Execute(const Event& e, bool flag, size_t at = std::string::npos) {
    if (stopped_) return false;
    const std::string op = OpName(e);
    absl::Status failed = absl::OkStatus();
    bool flagged = false;
    if (e.op == Event::Op::kBoundary) {
      if (e.kind == Event::Kind::kIssue) {
        at::Tensor mine = at::tensor({flag ? 1.0 : 0.0, in_reduce_ ? 1.0 : 0.0}, at::kDouble);
        std::vector<at::Tensor> all = {mine};
        failed = sharded::RunCollective(*world_, op, [&] { return world_->allreduce(all); });
        boundary_ = all[0];
      } else {
        flagged = boundary_[0].item<double>() > 0;
        const double reducing = boundary_[1].item<double>();
        if (!flagged && reducing != 0 && reducing != world_->getSize()) {
          flagged = true;
          if (in_reduce_) {
            own_error_ = absl::FailedPreconditionError(
                "fsdp: this rank's step entered no unit while other ranks entered them (per-unit fsdp needs every "
                "rank's forward to enter each unit, also on a rank without data)");
          }
        }
      }
    } else if (e.op == Event::Op::kGather) {
      const PhaseTimes::Scope timed(times_, Phase::kAllGather);  // issued, or waited for and copied out
      if (e.kind == Event::Kind::kIssue) {
        if (!flag && options_.on_unit_collective) options_.on_unit_collective("all-gather", units_[e.unit].name, step_);
        for (size_t i : units_[e.unit].buckets) {
          auto w = fsdp_internal::IssueGather(*pg_, buckets_[i], flag, op);
          if (!w.ok()) {
            failed = w.status();
            break;
          }
          in_flight_[e.unit].push_back(*std::move(w));
        }
      } else {
        std::vector<GatherWork> works = std::move(in_flight_[e.unit]);
        in_flight_.erase(e.unit);
        for (size_t k = 0; k < works.size() && failed.ok(); ++k) {
          auto got = fsdp_internal::FinishGather(*pg_, buckets_[units_[e.unit].buckets[k]], works[k], op);
          if (!got.ok()) {
            failed = got.status();
          } else {
            flagged = flagged || *got;
            if (!*got) ReportGather(e.unit, works[k]);
          }
        }
        if (!flagged && failed.ok()) EnsureGradHooks(e.unit);
      }
    } else if (e.kind == Event::Kind::kIssue) {
      const PhaseTimes::Scope timed(times_, Phase::kReduceScatter);
      reduce_flagged_ = false;
      if (!flag && options_.on_unit_collective) {
        options_.on_unit_collective("reduce-scatter", units_[e.unit].name, step_);
      }
      for (size_t i : units_[e.unit].buckets) {
        auto got = fsdp_internal::ReduceBucket(*pg_, buckets_[i], flag, path_, op, replicate_.get());
        if (!got.ok()) {
          failed = got.status();
          break;
        }
        reduce_flagged_ = reduce_flagged_ || *got;
        if (*got) break;  // every rank sees the flag in the same bucket
      }
      if (failed.ok() && !reduce_flagged_) ReshardUnit(e.unit);
    } else {
      flagged = reduce_flagged_;
    }
    if (failed.ok() && !flagged) return true;
    if (!failed.ok()) broken_ = failed;
    Stop();
    if (failed.ok() && replicate_ != nullptr && e.op == Event::Op::kGather) MeetReplicas(at);
    return false;
  }

  // HSDP: a flag in an all-gather stops this shard group only; the other
  // groups walk on to the next collective that spans them, the replicate
  // allreduce of the next reduce-scatter in the list (or, with none left,
  // the next boundary). This group meets them there with its flag set, so
  // every rank stops at the same collective.
  void MeetReplicas(size_t at) {
    std::string op = absl::StrCat("hsdp replicate allreduce at step ", step_);
    for (size_t j = at == std::string::npos ? events_.size() : at + 1; j < events_.size(); ++j) {
      const Event& e = events_[j];
      if (e.kind != Event::Kind::kIssue || e.op != Event::Op::kReduceScatter || units_[e.unit].buckets.empty()) {
        continue;
      }
      const absl::Status met =
          fsdp_internal::ReplicateFlag(*replicate_, buckets_[units_[e.unit].buckets.front()], OpName(e));
      if (!met.ok()) broken_ = met;
      return;
    }
    std::vector<at::Tensor> all = {at::tensor({1.0, 0.0}, at::kDouble)};
    const absl::Status met = sharded::RunCollective(*world_, op, [&] { return world_->allreduce(all); });
    if (!met.ok()) broken_ = met;
  }

  // Waits for what this rank issued (a rank stops after the collectives its
  // peers issued before they saw the flag), then every unit back to its shard.
  void Stop() {
    for (auto& [unit, works] : in_flight_) {
      for (GatherWork& w : works) {
        if (w.work) {
          sharded::NoThrow([&]() -> absl::Status {
            w.work->wait();
            return absl::OkStatus();
          }).IgnoreError();
        }
      }
    }
    in_flight_.clear();
    stopped_ = true;
    Reshard();
  }

  // Per-unit mode: the unit's reduce-scatter runs once every parameter's
  // gradient accumulated (a post hook on each AccumulateGrad, as FSDP1).
  void EnsureGradHooks(int unit) {
    if (unit + 1 >= static_cast<int>(units_.size())) return;
    for (size_t i : units_[unit].buckets) {
      for (FlatParam& p : buckets_[i].params) {
        // set_data to another dtype (a param_dtype unlike the shard's) drops
        // the variable's accumulator: the next forward makes a new one.
        auto current = torch::autograd::impl::grad_accumulator(p.param);
        if (p.accumulator == current) continue;
        p.accumulator = std::move(current);
        p.accumulator->add_post_hook(std::make_unique<GradsHook>(units_[unit].module));
      }
    }
  }

  class GradsHook : public torch::autograd::FunctionPostHook {
   public:
    explicit GradsHook(const torch::nn::Module* module) : module_(module) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                              const torch::autograd::variable_list& /*inputs*/) override {
      if (const auto entry = fsdp_internal::FindUnit(module_)) entry->hooks->GradAccumulated(entry->unit);
      return outputs;
    }

   private:
    const torch::nn::Module* module_;
  };

  absl::Status ReducePerUnit(const Trainables& trainables, const absl::Status& local, absl::string_view op) {
    if (!stopped_) {
      if (!local.ok()) {
        own_error_ = local;
        Join();
      } else if (InMicroBatch()) {
        own_error_ = absl::FailedPreconditionError(
            absl::StrCat("fsdp: the step ended where ", DescribeEvent(events_[cursor_], names_),
                         " was due (per-unit fsdp needs every rank's forward to enter each unit once, in "
                         "FsdpOptions::units order, and the loss to depend on every unit)"));
        Join();
      } else {
        in_reduce_ = true;
        if (Execute({Event::Kind::kIssue, Event::Point::kEnter, Event::Op::kBoundary, 0}, false)) {
          Execute({Event::Kind::kWait, Event::Point::kEnter, Event::Op::kBoundary, 0}, false);
        }
        in_reduce_ = false;
      }
    }
    if (stopped_) {
      const absl::Status broken = broken_;
      const absl::Status mine = own_error_;
      stopped_ = false;
      broken_ = own_error_ = absl::OkStatus();
      events_.clear();
      cursor_ = 0;
      if (!broken.ok()) return mine.ok() ? broken : mine;
      SL_RETURN_IF_ERROR(sharded::Agree(*world_, mine, op));
      return absl::InternalError(absl::StrCat(op, ": a rank reported a failure but no error"));
    }
    // The verdict is agreed: the root's gradients and the dense ones.
    const PhaseTimes::Scope timed(times_, Phase::kReduceScatter);
    for (size_t i : units_.back().buckets) {
      SL_ASSIGN_OR_RETURN(const bool flagged,
                          fsdp_internal::ReduceBucket(*pg_, buckets_[i], false, path_,
                                                      absl::StrCat(op, " (fsdp reduce-scatter of the root)"),
                                                      replicate_.get()));
      if (flagged) return absl::InternalError(absl::StrCat(op, ": a flag after the agreed verdict"));
    }
    if (trainables.dense.empty()) return absl::OkStatus();
    return AllreduceDenseGrads(trainables, *world_, absl::OkStatus(), op);
  }

  absl::Status ReduceWholeModel(const Trainables& trainables, const absl::Status& local, absl::string_view op) {
    const PhaseTimes::Scope timed(times_, Phase::kReduceScatter);
    bool carried = false;  // the first reduction carries the verdict
    for (Bucket& b : buckets_) {
      SL_ASSIGN_OR_RETURN(
          const bool flagged,
          fsdp_internal::ReduceBucket(*pg_, b, !carried && !local.ok(), path_,
                                      absl::StrCat(op, " (fsdp reduce-scatter of unit ", UnitName(units_[b.unit].name), ")"),
                                      replicate_.get()));
      if (flagged) {
        SL_RETURN_IF_ERROR(sharded::Agree(*world_, carried ? absl::OkStatus() : local, op));
        return absl::InternalError(absl::StrCat(op, ": a rank reported a failure but no error"));
      }
      carried = true;
    }
    if (carried && trainables.dense.empty()) return absl::OkStatus();
    return AllreduceDenseGrads(trainables, *world_, carried ? absl::OkStatus() : local, op);
  }

  c10::intrusive_ptr<c10d::ProcessGroup> world_;
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;         // the shards' group
  sharded::mesh::MeshPtr mesh_;                       // HSDP only
  c10::intrusive_ptr<c10d::ProcessGroup> replicate_;  // HSDP only
  std::vector<sharded::ShardedTensor> replicated_;    // the last UseCheckpointViews' originals
  FsdpOptions options_;
  bool probed_ = false;
  bool reduce_scatter_ = false;
  ReduceScatterPath path_ = ReduceScatterPath::kAllreduce;
  std::vector<Bucket> buckets_;
  std::vector<Unit> units_;  // the named ones in order, then the root
  bool per_unit_ = false;
  std::vector<std::string> names_;  // of the named units
  std::vector<bool> reshard_;
  int64_t step_ = 0;
  // The current micro-batch's schedule and how far this rank is in it.
  std::vector<Event> events_;
  size_t cursor_ = 0;
  std::map<int, std::vector<GatherWork>> in_flight_;
  std::map<int, int> grads_pending_;
  at::Tensor boundary_;
  bool reduce_flagged_ = false;
  bool in_reduce_ = false;
  bool stopped_ = false;
  absl::Status own_error_;  // this rank's failure, reported in the verdict
  absl::Status broken_;     // a collective that failed
  PhaseTimes* times_ = nullptr;  // TrainerOptions::phase_times
};

// The groups of one rank's run: the shards' (the world, or HSDP's shard
// group) and HSDP's replicate group.
struct Groups {
  c10::intrusive_ptr<c10d::ProcessGroup> shard;
  c10::intrusive_ptr<c10d::ProcessGroup> replicate;
};

// HSDP's mesh checked against the world (local: no collective).
absl::StatusOr<Groups> HybridGroups(const sharded::mesh::MeshPtr& mesh, const ShardedContext& ctx) {
  if (mesh == nullptr) {
    return absl::InvalidArgumentError("hsdp needs a 2-d device mesh (replicate, shard); got none");
  }
  if (mesh->ndim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("hsdp needs a 2-d device mesh (replicate, shard), not the ",
                                                   mesh->ndim(), "-d mesh ", mesh->ShapeString()));
  }
  if (mesh->size(0) * mesh->size(1) != ctx.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("hsdp: the mesh ", mesh->ShapeString(), " (replicate, shard) has ",
                                                   mesh->size(0) * mesh->size(1), " ranks, the world ",
                                                   ctx.world_size));
  }
  if (mesh->rank() != ctx.rank || mesh->world_size() != ctx.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("hsdp: the mesh ", mesh->ShapeString(), " was made for rank ",
                                                   mesh->rank(), " of ", mesh->world_size(), ", not rank ", ctx.rank,
                                                   " of this world's ", ctx.world_size));
  }
  return Groups{mesh->group(1), mesh->group(0)};
}

// The shard of `param` this rank keeps: its dim-0 chunk over `group`, as a
// ShardedTensor (no communication: every rank computes the same metadata).
// A deferred parameter (deferred_init.h) gets only this chunk filled, from
// its initialiser, and stops being deferred.
absl::StatusOr<sharded::ShardedTensor> ShardOf(const std::string& key, at::Tensor param,
                                               const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  const int size = group->getSize();
  sharded::TensorProperties properties;
  properties.dtype = param.scalar_type();
  properties.requires_grad = true;
  sharded::ChunkShardingSpec spec = sharded::ChunkShardingSpec::OnRanks(0, size);
  if (param.is_cuda()) {
    for (int r = 0; r < size; ++r) spec.placements[r] = sharded::Placement::Cuda(r, param.get_device());
  }
  SL_ASSIGN_OR_RETURN(sharded::ShardedTensorMetadata metadata,
                      sharded::BuildMetadata(spec, MaterializedSizes(param), properties, size));
  std::vector<sharded::Shard> local = sharded::AllocateLocalShards(metadata, group->getRank());
  if (IsDeferred(param)) {
    SL_RETURN_IF_ERROR(FillDeferredRows(param, key, local.front().metadata.offsets[0], local.front().tensor));
    FinishDeferred(param, local.front().tensor);
  } else {
    at::NoGradGuard no_grad;
    const sharded::ShardMetadata& m = local.front().metadata;
    local.front().tensor.copy_(param.detach().narrow(0, m.offsets[0], m.sizes[0]));
  }
  local.front().tensor.set_requires_grad(true);
  return sharded::ShardedTensor::InitFromLocalShardsAndGlobalMetadata(std::move(local), std::move(metadata), group);
}

}  // namespace

absl::Status FsdpStrategy::CheckPrecision(const std::string& precision) const {
  return CheckPolicyWithPrecision(options_.param_dtype, precision);
}

absl::StatusOr<std::unique_ptr<StrategyRun>> FsdpStrategy::Setup(LightningModule& module,
                                                                 const ShardedContext& ctx) const {
  if (!module.sharded_hooks_registered()) {
    return absl::FailedPreconditionError(absl::StrCat("fsdp needs ShardedTensor state dicts, which ", module.name(),
                                                      " could not register: ", module.gate().reason));
  }
  SL_RETURN_IF_ERROR(CheckFsdpPolicy(options_.param_dtype, options_.reduce_dtype));
  Groups groups{ctx.pg, {}};
  if (hybrid_) {
    SL_ASSIGN_OR_RETURN(groups, HybridGroups(hsdp_mesh_, ctx));
  }
  SL_ASSIGN_OR_RETURN(const std::vector<UnitPlan> plan, PlanUnits(module, options_.units));
  // A second Fit on the same group finds the parameters held sharded: it keeps them.
  const bool held = !module.sharded_parameters().empty();
  size_t planned = 0;
  std::vector<Bucket> buckets;
  std::vector<Unit> units;
  for (const UnitPlan& unit : plan) {
    const int index = static_cast<int>(units.size());
    units.push_back({unit.name, unit.module, {}, 0});
    std::map<c10::ScalarType, Bucket> by_dtype;
    for (const UnitParameter& u : unit.params) {
      ++planned;
      ++units.back().params;
      FlatParam p;
      p.param = u.param;
      if (held) {
        p.shard = module.sharded_parameter(u.key);
        if (p.shard == nullptr || p.shard->process_group() != groups.shard) {
          return absl::FailedPreconditionError(absl::StrCat(
              module.name(), " is held sharded by an earlier Fit ",
              p.shard == nullptr ? absl::StrCat("without parameter \"", u.key, "\"") : "on another process group",
              "; fit a fresh module (resume its state from a checkpoint)"));
        }
      } else {
        SL_ASSIGN_OR_RETURN(sharded::ShardedTensor shard, ShardOf(u.key, u.param, groups.shard));
        SL_RETURN_IF_ERROR(module.HoldParameterSharded(u.key, std::move(shard)));
        p.shard = module.sharded_parameter(u.key);
      }
      p.sizes = p.shard->sizes();
      p.rows = sharded::ChunkRanges(p.sizes[0], groups.shard->getSize());
      for (size_t d = 1; d < p.sizes.size(); ++d) p.row_numel *= p.sizes[d];
      int64_t chunk_rows = 0;
      for (const auto& [first, rows] : p.rows) chunk_rows = std::max(chunk_rows, rows);
      const c10::ScalarType dtype = p.shard->dtype();
      Bucket& b = by_dtype
                      .try_emplace(dtype, Bucket{index, dtype, {}, 0, options_.param_dtype.value_or(dtype),
                                                 options_.reduce_dtype.value_or(dtype), nullptr})
                      .first->second;
      p.offset = b.slot_numel;
      b.slot_numel += chunk_rows * p.row_numel;
      b.params.push_back(std::move(p));
    }
    for (auto& [dtype, b] : by_dtype) {
      units.back().buckets.push_back(buckets.size());
      buckets.push_back(std::move(b));
    }
  }
  if (held && planned != module.sharded_parameters().size()) {
    return absl::FailedPreconditionError(absl::StrCat(module.name(), " is held sharded by an earlier Fit with ",
                                                      module.sharded_parameters().size(),
                                                      " parameters; this plan shards ", planned));
  }
  if (options_.buffer_pool) {
    auto pool = std::make_shared<fsdp_internal::BufferPool>();
    for (Bucket& b : buckets) b.pool = pool;
  }
  auto run = std::make_unique<FsdpRun>(ctx.pg, groups.shard, hybrid_ ? hsdp_mesh_ : nullptr, options_,
                                       std::move(buckets), std::move(units));
  run->Reshard();  // between steps each parameter is its shard
  return std::unique_ptr<StrategyRun>(std::move(run));
}

}  // namespace shardlight::lightning
