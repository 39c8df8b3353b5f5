// Sharding specs: how a global tensor is split into shards across ranks.
//
// ChunkShardingSpec splits one dim the way torch.chunk does: chunk size is
// ceil(n / #placements); trailing chunks may be short or empty, and an empty
// chunk is still a (zero-size) shard of its placement. A negative dim counts
// from the back. EnumerableShardingSpec lists the shards explicitly; a rank
// may own several. BuildMetadata turns a spec and global sizes into validated
// ShardedTensorMetadata, or InvalidArgument naming what is wrong.
#ifndef SHARDLIGHT_SHARDED_SHARDING_SPEC_H_
#define SHARDLIGHT_SHARDED_SHARDING_SPEC_H_

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "sharded/placement.h"
#include "sharded/shard_metadata.h"

namespace shardlight::sharded {

struct ChunkShardingSpec {
  int64_t dim = 0;
  std::vector<Placement> placements;

  // One CPU placement per rank 0..world_size-1.
  static ChunkShardingSpec OnRanks(int64_t dim, int world_size);
};

struct EnumerableShardingSpec {
  std::vector<ShardMetadata> shards;
};

using ShardingSpec = std::variant<ChunkShardingSpec, EnumerableShardingSpec>;

// torch.chunk's split of `n` elements into `chunks` pieces: {offset, size}.
std::vector<std::pair<int64_t, int64_t>> ChunkRanges(int64_t n, int64_t chunks);

// Metadata for a tensor of `sizes` laid out by `spec`, validated. `world_size`
// bounds the placement ranks (pass 0 to skip that check).
absl::StatusOr<ShardedTensorMetadata> BuildMetadata(const ShardingSpec& spec,
                                                    const std::vector<int64_t>& sizes,
                                                    const TensorProperties& properties,
                                                    int world_size);

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_SHARDING_SPEC_H_
