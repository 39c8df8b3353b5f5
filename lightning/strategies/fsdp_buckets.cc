#include "lightning/strategies/fsdp_buckets.h"

#include <ATen/core/grad_mode.h>

#include "lightning/strategies/reduce_scatter.h"
#include "sharded/collectives.h"
#include "sharded/no_throw.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::fsdp_internal {
namespace {

void FreeStorage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void AllocateStorage(const at::Tensor& t, BufferPool* pool) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
  if (s->nbytes() == bytes) return;
  s->set_data_ptr_noswap(pool != nullptr && t.is_cpu() ? pool->Take(bytes) : s->allocator()->allocate(bytes));
  s->set_nbytes(bytes);
}

}  // namespace

const at::Tensor& LocalShard(const FlatParam& p) { return p.shard->local_shards().front().tensor; }

absl::StatusOr<GatherWork> IssueGather(c10d::ProcessGroup& pg, const Bucket& b, bool flag, const std::string& op) {
  at::NoGradGuard no_grad;
  const at::TensorOptions options = LocalShard(b.params.front()).options().dtype(b.compute_dtype).requires_grad(false);
  at::Tensor mine = EmptyFrom(b.pool.get(), {b.slot_numel + 1}, options).zero_();
  if (!flag) {
    for (const FlatParam& p : b.params) {
      const at::Tensor& shard = LocalShard(p);
      mine.narrow(0, p.offset, shard.numel()).copy_(shard.reshape({-1}));  // the cast to the compute dtype
    }
  }
  mine[-1].fill_(flag ? 1.0 : 0.0);
  GatherWork w;
  w.input = mine;
  w.bytes = mine.numel() * static_cast<int64_t>(mine.element_size()) * pg.getSize();
  if (pg.getSize() == 1) {
    w.output = {mine};
    return w;
  }
  // Every rank's slot in one buffer (one pooled block, not W).
  const at::Tensor gathered = EmptyFrom(b.pool.get(), {pg.getSize() * mine.numel()}, options);
  for (int r = 0; r < pg.getSize(); ++r) w.output.push_back(gathered.narrow(0, r * mine.numel(), mine.numel()));
  // A cast bucket travels as its bytes (byte views, each holding its tensor).
  const bool as_bytes = b.compute_dtype != b.dtype;
  const absl::Status issued = sharded::NoThrow([&]() -> absl::Status {
    sharded::internal::ArriveAtCollective(pg);
    std::vector<std::vector<at::Tensor>> output(1);
    for (const at::Tensor& slot : w.output) output[0].push_back(as_bytes ? sharded::ByteView(slot) : slot);
    std::vector<at::Tensor> input = {as_bytes ? sharded::ByteView(mine) : mine};
    w.work = pg.allgather(output, input);
    return absl::OkStatus();
  });
  if (!issued.ok()) return sharded::internal::CollectiveFailed(pg, op, issued);
  return w;
}

absl::StatusOr<bool> FinishGather(c10d::ProcessGroup& pg, Bucket& b, GatherWork& w, const std::string& op) {
  if (w.work) {
    const absl::Status waited = sharded::NoThrow([&]() -> absl::Status {
      w.work->wait();
      return absl::OkStatus();
    });
    w.work.reset();
    if (!waited.ok()) return sharded::internal::CollectiveFailed(pg, op, waited);
  }
  at::NoGradGuard no_grad;
  for (const at::Tensor& slot : w.output) {
    if (slot[-1].item<double>() != 0) return true;
  }
  for (FlatParam& p : b.params) {
    if (!p.full.defined()) {
      p.full = EmptyFrom(b.pool.get(), p.sizes, LocalShard(p).options().dtype(b.compute_dtype).requires_grad(false));
    } else {
      AllocateStorage(p.full, b.pool.get());
    }
    for (size_t r = 0; r < w.output.size(); ++r) {
      const auto [first, rows] = p.rows[r];
      if (rows == 0) continue;
      std::vector<int64_t> shape = p.sizes;
      shape[0] = rows;
      p.full.narrow(0, first, rows).copy_(w.output[r].narrow(0, p.offset, rows * p.row_numel).view(shape));
    }
    p.param.set_data(p.full);
  }
  w.output.clear();
  return false;
}

absl::StatusOr<bool> ReduceBucket(c10d::ProcessGroup& pg, Bucket& b, bool flag, ReduceScatterPath path,
                                  const std::string& op, c10d::ProcessGroup* replicate) {
  at::NoGradGuard no_grad;
  const int w = pg.getSize();
  // Every rank's slot end to end in one buffer (what the flat reduce-scatter takes).
  const int64_t slot_numel = b.slot_numel + 1;
  at::Tensor flat =
      EmptyFrom(b.pool.get(), {w * slot_numel},
                LocalShard(b.params.front()).options().dtype(b.reduce_dtype).requires_grad(false))
          .zero_();
  for (int r = 0; r < w; ++r) {
    at::Tensor slot = flat.narrow(0, r * slot_numel, slot_numel);
    for (const FlatParam& p : b.params) {
      const at::Tensor& grad = p.param.grad();
      if (!grad.defined() || flag) continue;  // zeros
      const auto [first, rows] = p.rows[r];
      slot.narrow(0, p.offset, rows * p.row_numel).copy_(grad.narrow(0, first, rows).reshape({-1}));
    }
    slot[-1].fill_(flag ? 1.0 : 0.0);
  }
  SL_ASSIGN_OR_RETURN(at::Tensor summed, ReduceScatterFlat(pg, std::move(flat), path, op));
  if (replicate != nullptr && replicate->getSize() > 1) {
    // FSDP2's HSDP: the shard group's sum, then an allreduce (sum) over the replicate group.
    std::vector<at::Tensor> all = {summed.contiguous()};
    SL_RETURN_IF_ERROR(sharded::RunCollective(*replicate, op, [&] { return replicate->allreduce(all); }));
    summed = all[0];
  }
  if (summed[-1].item<double>() > 0) return true;
  for (const FlatParam& p : b.params) {
    const at::Tensor& shard = LocalShard(p);
    // Cast first, then added (FSDP2 accumulates in the sharded dtype).
    const at::Tensor chunk = summed.narrow(0, p.offset, shard.numel()).view_as(shard);
    const bool cast = chunk.scalar_type() != shard.scalar_type();
    if (shard.grad().defined()) {
      shard.mutable_grad().add_(cast ? chunk.to(shard.scalar_type()) : chunk);
    } else {
      shard.mutable_grad() = cast ? chunk.to(shard.scalar_type()) : chunk.clone();
    }
  }
  return false;
}

absl::Status ReplicateFlag(c10d::ProcessGroup& replicate, const Bucket& b, const std::string& op) {
  if (replicate.getSize() == 1) return absl::OkStatus();
  std::vector<at::Tensor> all = {at::zeros({b.slot_numel + 1}, at::TensorOptions().dtype(b.reduce_dtype))};
  all[0][-1].fill_(1.0);
  return sharded::RunCollective(replicate, op, [&] { return replicate.allreduce(all); });
}

void ReshardBucket(Bucket& b) {
  at::NoGradGuard no_grad;
  for (FlatParam& p : b.params) {
    p.param.set_data(LocalShard(p));
    p.param.mutable_grad() = at::Tensor();
    if (p.full.defined()) FreeStorage(p.full);
  }
}

void ReshardAll(std::vector<Bucket>& buckets) {
  for (Bucket& b : buckets) ReshardBucket(b);
  // One pool serves a run's buckets (null without FsdpOptions::buffer_pool).
  if (!buckets.empty() && buckets.front().pool != nullptr) buckets.front().pool->ReleaseFree();
}

int64_t FullBytes(const Bucket& b) {
  int64_t bytes = 0;
  for (const FlatParam& p : b.params) {
    if (p.full.defined()) bytes += static_cast<int64_t>(p.full.storage().nbytes());
  }
  return bytes;
}

}  // namespace shardlight::lightning::fsdp_internal
