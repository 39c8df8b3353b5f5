// FSDP's flat buffers: the parameters of one unit with one dtype (a bucket)
// travel in one all-gather and one reduce-scatter. Each rank's slot holds its
// dim-0 chunk of every parameter, each padded to the largest rank's chunk so
// all ranks send equal sizes, then one element: the sender's failure flag
// (fsdp_schedule.h). A parameter's full tensor keeps one storage for the whole
// Fit: freed when its unit reshards and allocated again, in place, when it
// gathers, so that what autograd saved of it in the forward (views) sees the
// gathered values in the backward while holding no memory in between.
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_BUCKETS_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_BUCKETS_H_

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "lightning/strategies/fsdp_buffer_pool.h"
#include "lightning/strategies/reduce_scatter.h"
#include "sharded/sharded_tensor.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::lightning::fsdp_internal {

// One parameter's place in its bucket's flat buffers.
struct FlatParam {
  at::Tensor param;                // the registered variable
  sharded::ShardedTensor* shard;   // held by the root module
  std::vector<int64_t> sizes;      // global
  std::vector<std::pair<int64_t, int64_t>> rows;  // per rank: {first row, rows}
  int64_t row_numel = 1;
  int64_t offset = 0;  // in a rank's slot of the flat buffers
  at::Tensor full;     // the gathered tensor; its storage is freed while sharded
  // Per-unit mode: the AccumulateGrad node that carries the unit's
  // post-backward hook (held: the variable keeps it weakly). LibTorch 1.13
  // hands a shared_ptr, 2.x an intrusive_ptr.
  decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>())) accumulator;
};

struct Bucket {
  int unit = 0;  // index in the plan (the root last)
  c10::ScalarType dtype;  // the shards' (the master copy's)
  std::vector<FlatParam> params;
  int64_t slot_numel = 0;  // without the flag element
  // Mixed precision (FsdpOptions): the dtype the all-gather moves and the
  // full parameters compute in, and the one the gradients are summed in.
  // Both `dtype` without a policy.
  c10::ScalarType compute_dtype;
  c10::ScalarType reduce_dtype;
  // Where the bucket's transient CPU buffers come from (fsdp_buffer_pool.h):
  // one pool for a run's buckets. Null: at::empty.
  std::shared_ptr<BufferPool> pool;
};

const at::Tensor& LocalShard(const FlatParam& p);

// An all-gather in flight.
struct GatherWork {
  std::vector<at::Tensor> output;  // every rank's slot, in the bucket's compute dtype (views of one buffer)
  c10::intrusive_ptr<c10d::Work> work;  // null on one rank
  at::Tensor input;  // this rank's slot (its dtype: what the elements travel as)
  int64_t bytes = 0;  // what this rank receives
};

// Issues the bucket's all-gather (asynchronous): this rank's chunks cast to
// the compute dtype, or zeros with the flag set. A cast bucket travels as its
// bytes (uint8), so the backend needs no collective of the compute dtype.
// Unavailable naming `op` when c10d refuses it.
absl::StatusOr<GatherWork> IssueGather(c10d::ProcessGroup& pg, const Bucket& b, bool flag, const std::string& op);

// Waits for it. True when some rank's flag is set (then nothing is applied);
// else every parameter is set to its full tensor. Unavailable naming `op`.
absl::StatusOr<bool> FinishGather(c10d::ProcessGroup& pg, Bucket& b, GatherWork& w, const std::string& op);

// Reduce-scatters the bucket's full gradients, cast to its reduce dtype
// (zeros with the flag set; a missing gradient counts as zeros), and adds this
// rank's chunk, cast to the shard's dtype, to each shard's gradient. HSDP
// (`replicate` not null): the summed chunk, flag included, is then summed
// over the replicate group before it is applied, so a flag set anywhere in
// the world is seen by every rank in the same bucket.
// True when some rank's flag was set (nothing applied).
absl::StatusOr<bool> ReduceBucket(c10d::ProcessGroup& pg, Bucket& b, bool flag, ReduceScatterPath path,
                                  const std::string& op, c10d::ProcessGroup* replicate = nullptr);

// HSDP, a rank whose shard group stopped before the bucket's reduction:
// only the replicate allreduce of ReduceBucket, zeros with the flag set (the
// same size and dtype), so the other shard groups, which run the whole
// reduction, stop there too. Unavailable naming `op`.
absl::Status ReplicateFlag(c10d::ProcessGroup& replicate, const Bucket& b, const std::string& op);

// Every parameter of `b` back to its shard, without its full gradient; the
// full storage freed (back to the bucket's pool).
void ReshardBucket(Bucket& b);

// ReshardBucket of each, then the free blocks of their pools unmapped: the
// end of a step (or of a failed one), after which nothing transient is held.
void ReshardAll(std::vector<Bucket>& buckets);

// Bytes of full parameter storage `b` holds now.
int64_t FullBytes(const Bucket& b);

}  // namespace shardlight::lightning::fsdp_internal

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_BUCKETS_H_
