// DistributedSampler: which samples of an indexed data set each data-parallel
// rank trains on at each global step -- Lightning's distributed sampler, by
// global batch.
//
// The order: epoch e is a permutation of [0, size) drawn as torch does it,
// torch.randperm(size, generator=torch.Generator().manual_seed(seed + e))
// (the same mt19937 stream in LibTorch and Python torch on CPU; checked
// against the real torch by torch_randperm_test on the torch 2.x leg -- the
// order torch's DistributedSampler(shuffle=True) draws before it deals
// samples out). Unshuffled: 0, 1, 2, ...
// Global step s is batch k = s mod steps_per_epoch of epoch e = s div
// steps_per_epoch, its samples perm[k*B, (k+1)*B) (B = global_batch; a last
// partial batch is dropped, as drop_last=True). That global batch is dealt
// out in contiguous slices: DP rank r of D gets rows [r*B/D, (r+1)*B/D)
// (integer division: sizes differ by at most one; with B < D some ranks get
// none). Tensor-parallel ranks of one DP group pass the same dp_rank and see
// the same samples.
//
// Everything is a pure function of (seed, step): a resume at any step on any
// world size trains on exactly the global batches the uninterrupted run would
// have, with no sampler state in the checkpoint.
#ifndef SHARDLIGHT_LIGHTNING_DATA_DISTRIBUTED_SAMPLER_H_
#define SHARDLIGHT_LIGHTNING_DATA_DISTRIBUTED_SAMPLER_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "lightning/trainer.h"

namespace shardlight::lightning::data {

struct SamplerOptions {
  int64_t size = 0;          // samples in the data set
  int64_t global_batch = 1;  // samples per global step, over every DP rank
  int dp_size = 1;
  int dp_rank = 0;
  bool shuffle = true;
  uint64_t seed = 0;
};

class DistributedSampler {
 public:
  // InvalidArgument naming the option unless size >= global_batch >= 1,
  // dp_size >= 1 and 0 <= dp_rank < dp_size.
  static absl::StatusOr<DistributedSampler> Create(const SamplerOptions& options);

  int64_t steps_per_epoch() const { return options_.size / options_.global_batch; }
  // Epoch `epoch`'s order: int64 [size].
  at::Tensor EpochOrder(int64_t epoch) const;
  // The global batch of step `step` (0-based): int64 [global_batch].
  at::Tensor GlobalIndices(int64_t step) const;
  // This DP rank's slice of it (possibly empty).
  at::Tensor Indices(int64_t step) const;

 private:
  explicit DistributedSampler(const SamplerOptions& options) : options_(options) {}
  SamplerOptions options_;
};

// A DataSource over an indexed data set: GetBatch(step) is `fetch` of this
// rank's Indices(step). A TrainingStep then sees only its slice; normalise
// the loss by the global batch (sum of per-sample losses / global_batch), as
// the gradients are summed over ranks.
class SampledDataSource : public DataSource {
 public:
  using Fetch = std::function<Batch(const at::Tensor& indices)>;
  SampledDataSource(DistributedSampler sampler, Fetch fetch) : sampler_(std::move(sampler)), fetch_(std::move(fetch)) {}
  Batch GetBatch(int64_t step) const override { return fetch_(sampler_.Indices(step)); }
  int64_t steps_per_epoch() const override { return sampler_.steps_per_epoch(); }
  const DistributedSampler& sampler() const { return sampler_; }

 private:
  DistributedSampler sampler_;
  Fetch fetch_;
};

}  // namespace shardlight::lightning::data

#endif  // SHARDLIGHT_LIGHTNING_DATA_DISTRIBUTED_SAMPLER_H_
