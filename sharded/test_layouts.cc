#include "sharded/test_layouts.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "sharded/tensor_region.h"

namespace shardlight::sharded::testing {
namespace {

int64_t Uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {  // inclusive
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// Sorted cut points splitting [0, n) into `pieces` ranges, empty ones allowed.
std::vector<int64_t> Cuts(std::mt19937_64& rng, int64_t n, int pieces) {
  std::vector<int64_t> cuts = {0, n};
  for (int i = 1; i < pieces; ++i) cuts.push_back(Uniform(rng, 0, n));
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

}  // namespace

Layout RandomLayout(std::mt19937_64& rng, int world_size) {
  Layout layout;
  const int ndim = static_cast<int>(Uniform(rng, 1, 4));
  const int64_t max_extent = ndim == 1 ? 40 : ndim == 2 ? 12 : 6;
  for (int d = 0; d < ndim; ++d) layout.sizes.push_back(Uniform(rng, Uniform(rng, 0, 9) == 0 ? 0 : 1, max_extent));
  static const c10::ScalarType kDtypes[] = {c10::ScalarType::Float, c10::ScalarType::Double,
                                            c10::ScalarType::BFloat16, c10::ScalarType::Long,
                                            c10::ScalarType::Bool};
  layout.dtype = kDtypes[Uniform(rng, 0, 4)];
  layout.spec = RandomSpecFor(rng, layout.sizes, world_size, &layout.description);
  std::string shape;
  for (int64_t s : layout.sizes) absl::StrAppend(&shape, shape.empty() ? "" : "x", s);
  layout.description = absl::StrCat(shape, " ", c10::toString(layout.dtype), ", ", layout.description);
  return layout;
}

ShardingSpec RandomSpecFor(std::mt19937_64& rng, const std::vector<int64_t>& sizes, int world_size,
                           std::string* description) {
  const int ndim = static_cast<int>(sizes.size());
  if (Uniform(rng, 0, 1) == 0) {
    ChunkShardingSpec chunk;
    chunk.dim = Uniform(rng, -ndim, ndim - 1);
    // Sometimes more placements than elements: trailing chunks come out empty.
    const int n = static_cast<int>(Uniform(rng, 1, 2 * world_size + 1));
    for (int i = 0; i < n; ++i) {
      chunk.placements.push_back(Placement::Cpu(i < world_size && Uniform(rng, 0, 2) > 0
                                                    ? i
                                                    : static_cast<int>(Uniform(rng, 0, world_size - 1))));
    }
    *description = absl::StrCat("chunk dim ", chunk.dim, " over ", n, " placements");
    return chunk;
  }
  {
    // A random grid: every dim cut into 1-3 pieces, each block on a random rank.
    std::vector<std::vector<int64_t>> cuts;
    for (int d = 0; d < ndim; ++d) cuts.push_back(Cuts(rng, sizes[d], static_cast<int>(Uniform(rng, 1, 3))));
    EnumerableShardingSpec spec;
    std::vector<size_t> block(ndim, 0);
    while (true) {
      ShardMetadata s;
      for (int d = 0; d < ndim; ++d) {
        s.offsets.push_back(cuts[d][block[d]]);
        s.sizes.push_back(cuts[d][block[d] + 1] - cuts[d][block[d]]);
      }
      s.placement = Placement::Cpu(static_cast<int>(Uniform(rng, 0, world_size - 1)));
      spec.shards.push_back(std::move(s));
      int d = ndim - 1;
      while (d >= 0 && ++block[d] == cuts[d].size() - 1) block[d--] = 0;
      if (d < 0) break;
    }
    *description = absl::StrCat("grid of ", spec.shards.size(), " shards");
    return spec;
  }
}

at::Tensor ReferenceTensor(const std::vector<int64_t>& sizes, c10::ScalarType dtype) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  at::Tensor index = at::arange(n, at::kLong);
  switch (dtype) {
    case c10::ScalarType::Bool:
      return ((index * 7 + 3) % 5 < 2).view(sizes);
    case c10::ScalarType::BFloat16:
      return (index % 251).to(dtype).view(sizes);  // exact in bfloat16
    case c10::ScalarType::Long:
      return (index * 1000003 + 17).view(sizes);
    default:
      return (index.to(dtype) * 0.5 + 0.25).view(sizes);
  }
}

std::vector<Shard> LocalShardsOf(const at::Tensor& reference, const ShardedTensorMetadata& metadata, int rank) {
  std::vector<Shard> shards;
  const Box whole = Box::Whole(reference.sizes().vec());
  for (int i : metadata.ShardsOnRank(rank)) {
    const ShardMetadata& m = metadata.shards[i];
    shards.push_back({RegionView(reference, whole, m).clone(), m});
  }
  return shards;
}

}  // namespace shardlight::sharded::testing
