#include "sharded/sharding_spec.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace shardlight::sharded {

ChunkShardingSpec ChunkShardingSpec::OnRanks(int64_t dim, int world_size) {
  ChunkShardingSpec spec;
  spec.dim = dim;
  for (int r = 0; r < world_size; ++r) spec.placements.push_back(Placement::Cpu(r));
  return spec;
}

std::vector<std::pair<int64_t, int64_t>> ChunkRanges(int64_t n, int64_t chunks) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  if (n < 0 || chunks <= 0) return ranges;
  // ceil(n / chunks) without the overflow of n + chunks - 1 near INT64_MAX.
  const int64_t chunk = n / chunks + (n % chunks != 0 ? 1 : 0);
  for (int64_t i = 0; i < chunks; ++i) {
    const int64_t begin = (chunk == 0 || i > n / chunk) ? n : i * chunk;  // i * chunk <= n: no overflow
    ranges.emplace_back(begin, std::min(chunk, n - begin));
  }
  return ranges;
}

absl::StatusOr<ShardedTensorMetadata> BuildMetadata(const ShardingSpec& spec,
                                                    const std::vector<int64_t>& sizes,
                                                    const TensorProperties& properties,
                                                    int world_size) {
  auto total = CheckedNumElements(sizes);
  if (!total.ok()) return absl::InvalidArgumentError(absl::StrCat("global sizes: ", total.status().message()));
  ShardedTensorMetadata m;
  m.sizes = sizes;
  m.properties = properties;
  if (const auto* chunk = std::get_if<ChunkShardingSpec>(&spec)) {
    const int64_t ndim = static_cast<int64_t>(sizes.size());
    const int64_t dim = chunk->dim < 0 ? chunk->dim + ndim : chunk->dim;
    if (dim < 0 || dim >= ndim) {
      return absl::InvalidArgumentError(absl::StrCat("chunk dim ", chunk->dim, " is out of range for a ",
                                                     ndim, "-d tensor of sizes ", ShapeToString(sizes)));
    }
    if (chunk->placements.empty()) return absl::InvalidArgumentError("chunk spec has no placements");
    const auto ranges = ChunkRanges(sizes[dim], static_cast<int64_t>(chunk->placements.size()));
    for (size_t i = 0; i < ranges.size(); ++i) {
      ShardMetadata s;
      s.offsets.assign(ndim, 0);
      s.sizes.assign(sizes.begin(), sizes.end());
      s.offsets[dim] = ranges[i].first;
      s.sizes[dim] = ranges[i].second;
      s.placement = chunk->placements[i];
      m.shards.push_back(std::move(s));
    }
  } else {
    m.shards = std::get<EnumerableShardingSpec>(spec).shards;
  }
  for (size_t i = 0; i < m.shards.size(); ++i) {
    const int rank = m.shards[i].placement.rank;
    if (world_size > 0 && (rank < 0 || rank >= world_size)) {
      return absl::InvalidArgumentError(absl::StrCat("shard ", i, " is placed on ",
                                                     m.shards[i].placement.ToString(),
                                                     " but the process group has ", world_size, " ranks"));
    }
  }
  absl::Status valid = m.Validate();
  if (!valid.ok()) return valid;
  return m;
}

}  // namespace shardlight::sharded
