#include "lightning/data/distributed_sampler.h"

#include <ATen/CPUGeneratorImpl.h>

#include "absl/strings/str_cat.h"

namespace shardlight::lightning::data {

absl::StatusOr<DistributedSampler> DistributedSampler::Create(const SamplerOptions& o) {
  if (o.global_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("sampler: global_batch must be >= 1, got ", o.global_batch));
  }
  if (o.size < o.global_batch) {
    return absl::InvalidArgumentError(absl::StrCat("sampler: the data set's size ", o.size,
                                                   " is less than one global_batch (", o.global_batch, ")"));
  }
  if (o.dp_size < 1 || o.dp_rank < 0 || o.dp_rank >= o.dp_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: dp_rank ", o.dp_rank, " is outside [0, dp_size ", o.dp_size, ")"));
  }
  return DistributedSampler(o);
}

at::Tensor DistributedSampler::EpochOrder(int64_t epoch) const {
  if (!options_.shuffle) return at::arange(options_.size, at::kLong);
  auto gen = at::detail::createCPUGenerator(options_.seed + static_cast<uint64_t>(epoch));
  return at::randperm(options_.size, gen, at::kLong);
}

at::Tensor DistributedSampler::GlobalIndices(int64_t step) const {
  const int64_t per_epoch = steps_per_epoch();
  const int64_t b = options_.global_batch;
  return EpochOrder(step / per_epoch).narrow(0, (step % per_epoch) * b, b);
}

at::Tensor DistributedSampler::Indices(int64_t step) const {
  const int64_t b = options_.global_batch, d = options_.dp_size, r = options_.dp_rank;
  const int64_t begin = r * b / d, end = (r + 1) * b / d;
  return GlobalIndices(step).narrow(0, begin, end - begin);
}

}  // namespace shardlight::lightning::data
