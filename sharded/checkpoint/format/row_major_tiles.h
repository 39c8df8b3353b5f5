// Splitting a box into row-major pieces that fit a bounded buffer.
//
// Streaming a tensor through a fixed buffer (save of a non-contiguous tensor,
// consolidation of a sharded one) needs pieces that are each one contiguous
// run of the box's row-major order and hold at most a given number of
// elements: whole rows of the outermost dims where they fit, otherwise the
// split moves one dim inward.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_ROW_MAJOR_TILES_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_ROW_MAJOR_TILES_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"

namespace shardlight::sharded::checkpoint {

using TileFn = std::function<absl::Status(const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes)>;

// Calls `fn` for each tile of the box [0, sizes), in row-major order; stops at
// the first error. Each tile holds 1..max(1, max_elements) elements; a box
// with no elements yields no tiles; a 0-d box yields one empty-shaped tile.
absl::Status ForEachRowMajorTile(const std::vector<int64_t>& sizes, int64_t max_elements, const TileFn& fn);

// Row-major strides (in elements) of a box of `sizes`.
std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& sizes);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_ROW_MAJOR_TILES_H_
