#include "lightning/strategies/fsdp_strategy.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lightning/strategies/fsdp_units.h"
#include "lightning/strategies/gradient_reduction.h"
#include "lightning/strategies/reduce_scatter.h"
#include "sharded/agreement.h"
#include "sharded/collectives.h"
#include "sharded/sharding_spec.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {
namespace {

// One parameter's place in its bucket's flat buffers.
struct FlatParam {
  at::Tensor param;                // the registered variable
  sharded::ShardedTensor* shard;   // held by the root module
  std::vector<int64_t> sizes;      // global
  std::vector<std::pair<int64_t, int64_t>> rows;  // per rank: {first row, rows}
  int64_t row_numel = 1;
  int64_t offset = 0;  // in a rank's slot of the flat buffers
};

// The parameters of one unit with one dtype: one all-gather, one reduce-scatter.
struct Bucket {
  std::string unit;
  c10::ScalarType dtype;
  std::vector<FlatParam> params;
  int64_t slot_numel = 0;  // every rank's chunks, each padded to the largest chunk
};

const at::Tensor& LocalShard(const FlatParam& p) { return p.shard->local_shards().front().tensor; }

std::string UnitName(const std::string& unit) { return unit.empty() ? "the root" : absl::StrCat("\"", unit, "\""); }

class FsdpRun : public StrategyRun {
 public:
  FsdpRun(c10::intrusive_ptr<c10d::ProcessGroup> pg, bool reduce_scatter, std::vector<Bucket> buckets)
      : pg_(std::move(pg)), try_reduce_scatter_(reduce_scatter), buckets_(std::move(buckets)) {}

  absl::Status BeforeStep(int64_t step) override {
    if (!probed_) {
      if (try_reduce_scatter_) {
        SL_ASSIGN_OR_RETURN(reduce_scatter_, ProbeReduceScatter(*pg_));
      }
      probed_ = true;
    }
    absl::Status gathered = absl::OkStatus();
    for (Bucket& b : buckets_) {
      gathered = Gather(b, absl::StrCat("fsdp all-gather of unit ", UnitName(b.unit), " at step ", step));
      if (!gathered.ok()) break;
    }
    if (!gathered.ok()) Reshard();
    return gathered;
  }

  absl::Status ReduceGradients(const Trainables& trainables, const absl::Status& local,
                               absl::string_view op) override {
    absl::Status reduced = [&]() -> absl::Status {
      bool carried = false;  // the first reduction carries the verdict
      for (Bucket& b : buckets_) {
        SL_RETURN_IF_ERROR(Reduce(b, carried ? absl::OkStatus() : local, op));
        carried = true;
      }
      if (carried && trainables.dense.empty()) return absl::OkStatus();
      return AllreduceDenseGrads(trainables, *pg_, carried ? absl::OkStatus() : local, op);
    }();
    Reshard();
    return reduced;
  }

  c10d::ProcessGroup& loss_group() override { return *pg_; }

  // Every parameter back to its shard, without its full gradient.
  void Reshard() {
    at::NoGradGuard no_grad;
    for (Bucket& b : buckets_) {
      for (FlatParam& p : b.params) {
        p.param.set_data(LocalShard(p));
        p.param.mutable_grad() = at::Tensor();
      }
    }
  }

 private:
  absl::Status Gather(Bucket& b, const std::string& op) {
    at::NoGradGuard no_grad;
    const int w = pg_->getSize();
    at::Tensor mine = at::zeros({b.slot_numel}, at::TensorOptions().dtype(b.dtype));
    for (const FlatParam& p : b.params) {
      const at::Tensor& shard = LocalShard(p);
      mine.narrow(0, p.offset, shard.numel()).copy_(shard.reshape({-1}));
    }
    std::vector<std::vector<at::Tensor>> gathered(1);
    if (w == 1) {
      gathered[0] = {mine};
    } else {
      for (int r = 0; r < w; ++r) gathered[0].push_back(at::empty_like(mine));
      std::vector<at::Tensor> input = {mine};
      SL_RETURN_IF_ERROR(sharded::RunCollective(*pg_, op, [&] { return pg_->allgather(gathered, input); }));
    }
    for (FlatParam& p : b.params) {
      std::vector<at::Tensor> pieces;
      for (int r = 0; r < w; ++r) pieces.push_back(gathered[0][r].narrow(0, p.offset, p.rows[r].second * p.row_numel));
      p.param.set_data(at::cat(pieces).view(p.sizes));
    }
    return absl::OkStatus();
  }

  absl::Status Reduce(Bucket& b, const absl::Status& local, absl::string_view op) {
    at::NoGradGuard no_grad;
    const int w = pg_->getSize();
    std::vector<at::Tensor> slots;
    for (int r = 0; r < w; ++r) {
      at::Tensor slot = at::zeros({b.slot_numel + 1}, at::TensorOptions().dtype(b.dtype));
      for (const FlatParam& p : b.params) {
        const at::Tensor& grad = p.param.grad();
        if (!grad.defined() || !local.ok()) continue;  // zeros
        const auto [first, rows] = p.rows[r];
        slot.narrow(0, p.offset, rows * p.row_numel).copy_(grad.narrow(0, first, rows).reshape({-1}));
      }
      slot[-1].fill_(local.ok() ? 0.0 : 1.0);
      slots.push_back(std::move(slot));
    }
    SL_ASSIGN_OR_RETURN(const at::Tensor summed,
                        ReduceScatterSlots(*pg_, std::move(slots), reduce_scatter_,
                                           absl::StrCat(op, " (fsdp reduce-scatter of unit ", UnitName(b.unit), ")")));
    if (summed[-1].item<double>() > 0) {
      SL_RETURN_IF_ERROR(sharded::Agree(*pg_, local, op));
      return absl::InternalError(absl::StrCat(op, ": a rank reported a failure but no error"));
    }
    for (const FlatParam& p : b.params) {
      const at::Tensor& shard = LocalShard(p);
      shard.mutable_grad() = summed.narrow(0, p.offset, shard.numel()).view_as(shard).clone();
    }
    return absl::OkStatus();
  }

  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  bool try_reduce_scatter_;
  bool probed_ = false;
  bool reduce_scatter_ = false;
  std::vector<Bucket> buckets_;
};

// The shard of `param` this rank keeps: its dim-0 chunk, as a ShardedTensor
// (no communication: every rank computes the same metadata).
absl::StatusOr<sharded::ShardedTensor> ShardOf(const at::Tensor& param, const ShardedContext& ctx) {
  sharded::TensorProperties properties;
  properties.dtype = param.scalar_type();
  properties.requires_grad = true;
  sharded::ChunkShardingSpec spec = sharded::ChunkShardingSpec::OnRanks(0, ctx.world_size);
  if (param.is_cuda()) {
    for (int r = 0; r < ctx.world_size; ++r) spec.placements[r] = sharded::Placement::Cuda(r, param.get_device());
  }
  SL_ASSIGN_OR_RETURN(sharded::ShardedTensorMetadata metadata,
                      sharded::BuildMetadata(spec, param.sizes().vec(), properties, ctx.world_size));
  std::vector<sharded::Shard> local = sharded::AllocateLocalShards(metadata, ctx.rank);
  {
    at::NoGradGuard no_grad;
    const sharded::ShardMetadata& m = local.front().metadata;
    local.front().tensor.copy_(param.detach().narrow(0, m.offsets[0], m.sizes[0]));
  }
  local.front().tensor.set_requires_grad(true);
  return sharded::ShardedTensor::InitFromLocalShardsAndGlobalMetadata(std::move(local), std::move(metadata), ctx.pg);
}

}  // namespace

absl::StatusOr<std::unique_ptr<StrategyRun>> FsdpStrategy::Setup(LightningModule& module,
                                                                 const ShardedContext& ctx) const {
  if (!module.sharded_hooks_registered()) {
    return absl::FailedPreconditionError(absl::StrCat("fsdp needs ShardedTensor state dicts, which ", module.name(),
                                                      " could not register: ", module.gate().reason));
  }
  SL_ASSIGN_OR_RETURN(const std::vector<UnitPlan> plan, PlanUnits(module, options_.units));
  // A second Fit on the same group finds the parameters held sharded: it keeps them.
  const bool held = !module.sharded_parameters().empty();
  size_t planned = 0;
  std::vector<Bucket> buckets;
  for (const UnitPlan& unit : plan) {
    std::map<c10::ScalarType, Bucket> by_dtype;
    for (const UnitParameter& u : unit.params) {
      ++planned;
      FlatParam p;
      p.param = u.param;
      if (held) {
        p.shard = module.sharded_parameter(u.key);
        if (p.shard == nullptr || p.shard->process_group() != ctx.pg) {
          return absl::FailedPreconditionError(absl::StrCat(
              module.name(), " is held sharded by an earlier Fit ",
              p.shard == nullptr ? absl::StrCat("without parameter \"", u.key, "\"") : "on another process group",
              "; fit a fresh module (resume its state from a checkpoint)"));
        }
      } else {
        SL_ASSIGN_OR_RETURN(sharded::ShardedTensor shard, ShardOf(u.param, ctx));
        SL_RETURN_IF_ERROR(module.HoldParameterSharded(u.key, std::move(shard)));
        p.shard = module.sharded_parameter(u.key);
      }
      p.sizes = p.shard->sizes();
      p.rows = sharded::ChunkRanges(p.sizes[0], ctx.world_size);
      for (size_t d = 1; d < p.sizes.size(); ++d) p.row_numel *= p.sizes[d];
      int64_t chunk_rows = 0;
      for (const auto& [first, rows] : p.rows) chunk_rows = std::max(chunk_rows, rows);
      Bucket& b = by_dtype.try_emplace(p.shard->dtype(), Bucket{unit.name, p.shard->dtype(), {}, 0}).first->second;
      p.offset = b.slot_numel;
      b.slot_numel += chunk_rows * p.row_numel;
      b.params.push_back(std::move(p));
    }
    for (auto& [dtype, b] : by_dtype) buckets.push_back(std::move(b));
  }
  if (held && planned != module.sharded_parameters().size()) {
    return absl::FailedPreconditionError(absl::StrCat(module.name(), " is held sharded by an earlier Fit with ",
                                                      module.sharded_parameters().size(),
                                                      " parameters; this plan shards ", planned));
  }
  auto run = std::make_unique<FsdpRun>(ctx.pg, options_.reduce_scatter, std::move(buckets));
  run->Reshard();  // between steps each parameter is its shard
  return std::unique_ptr<StrategyRun>(std::move(run));
}

}  // namespace shardlight::lightning
