#include "sharded/checkpoint/format/row_major_tiles.h"
#include "sharded/status_macros.h"

#include <algorithm>

namespace shardlight::sharded::checkpoint {
namespace {

absl::Status Tile(const std::vector<int64_t>& sizes, int64_t max_elements, size_t dim,
                  std::vector<int64_t>& offsets, std::vector<int64_t>& tile_sizes, const TileFn& fn) {
  int64_t inner = 1;  // elements in one index of `dim`
  for (size_t d = dim + 1; d < sizes.size(); ++d) inner *= sizes[d];
  if (inner <= max_elements) {
    // Whole rows of `dim` fit: take as many as the buffer holds.
    const int64_t rows = std::max<int64_t>(1, max_elements / inner);
    for (int64_t r = 0; r < sizes[dim]; r += rows) {
      offsets[dim] = r;
      tile_sizes[dim] = std::min(rows, sizes[dim] - r);
      SL_RETURN_IF_ERROR(fn(offsets, tile_sizes));
    }
  } else {
    // One row is too large: fix this index and split the next dim.
    tile_sizes[dim] = 1;
    for (int64_t r = 0; r < sizes[dim]; ++r) {
      offsets[dim] = r;
      SL_RETURN_IF_ERROR(Tile(sizes, max_elements, dim + 1, offsets, tile_sizes, fn));
    }
  }
  offsets[dim] = 0;
  tile_sizes[dim] = sizes[dim];
  return absl::OkStatus();
}

}  // namespace

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * std::max<int64_t>(sizes[d], 1);
  return strides;
}

absl::Status ForEachRowMajorTile(const std::vector<int64_t>& sizes, int64_t max_elements, const TileFn& fn) {
  if (sizes.empty()) return fn({}, {});
  for (int64_t s : sizes) {
    if (s == 0) return absl::OkStatus();
  }
  std::vector<int64_t> offsets(sizes.size(), 0);
  std::vector<int64_t> tile_sizes = sizes;
  return Tile(sizes, std::max<int64_t>(1, max_elements), 0, offsets, tile_sizes, fn);
}

}  // namespace shardlight::sharded::checkpoint
