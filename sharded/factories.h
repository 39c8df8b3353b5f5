// Factories: a ShardedTensor laid out by a spec, with every local shard
// allocated and filled. Collective (ranks confirm they agree on the layout).
//
// Rand/Randn values depend only on (seed, global index): see global_random.h.
// Errors: InvalidArgument for a bad spec or sizes, an unsupported dtype, or
// Rand/Randn of a non-floating dtype; the same error on every rank when ranks
// pass different layouts; Unavailable if the group fails.
#ifndef SHARDLIGHT_SHARDED_FACTORIES_H_
#define SHARDLIGHT_SHARDED_FACTORIES_H_

#include <c10/core/Scalar.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "sharded/sharded_tensor.h"

namespace shardlight::sharded {

struct ShardedOptions {
  c10::ScalarType dtype = c10::ScalarType::Float;
  bool requires_grad = false;
};

using ProcessGroupPtr = ShardedTensor::ProcessGroupPtr;

absl::StatusOr<ShardedTensor> Empty(const ShardingSpec& spec, const std::vector<int64_t>& sizes,
                                    const ShardedOptions& options, ProcessGroupPtr pg);
absl::StatusOr<ShardedTensor> Zeros(const ShardingSpec& spec, const std::vector<int64_t>& sizes,
                                    const ShardedOptions& options, ProcessGroupPtr pg);
absl::StatusOr<ShardedTensor> Ones(const ShardingSpec& spec, const std::vector<int64_t>& sizes,
                                   const ShardedOptions& options, ProcessGroupPtr pg);
absl::StatusOr<ShardedTensor> Full(const ShardingSpec& spec, const std::vector<int64_t>& sizes,
                                   const c10::Scalar& value, const ShardedOptions& options,
                                   ProcessGroupPtr pg);
absl::StatusOr<ShardedTensor> Rand(const ShardingSpec& spec, const std::vector<int64_t>& sizes,
                                   uint64_t seed, const ShardedOptions& options, ProcessGroupPtr pg);
absl::StatusOr<ShardedTensor> Randn(const ShardingSpec& spec, const std::vector<int64_t>& sizes,
                                    uint64_t seed, const ShardedOptions& options, ProcessGroupPtr pg);

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_FACTORIES_H_
