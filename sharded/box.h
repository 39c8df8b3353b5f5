// Box: an axis-aligned block of a global tensor (offsets and sizes per dim).
// The one value type for "which part of the tensor": shard metadata, the
// checkpoint index, the load planner and the box exchange all build on it.
// No LibTorch here, so offline tools can use it without the collectives.
#ifndef SHARDLIGHT_SHARDED_BOX_H_
#define SHARDLIGHT_SHARDED_BOX_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"

namespace shardlight::sharded {

// Per-dim values of a box, inline up to 4 dims (no heap block for the
// common case: a checkpoint index holds one box per shard).
using Dims = absl::InlinedVector<int64_t, 4>;

struct Box {
  Dims offsets;
  Dims sizes;

  // The whole of a tensor of `sizes`: zero offsets.
  static Box Whole(absl::Span<const int64_t> sizes);
  // The product of the sizes (1 for a 0-d box).
  int64_t NumElements() const;

  friend bool operator==(const Box& a, const Box& b) { return a.offsets == b.offsets && a.sizes == b.sizes; }
};

// Whether two lists of dims hold the same values (either container).
inline bool SameDims(absl::Span<const int64_t> a, absl::Span<const int64_t> b) { return a == b; }

// The common part of two boxes of the same rank of dims; nullopt when it is
// empty. Two 0-d boxes intersect in their one element.
std::optional<Box> Intersect(const Box& a, const Box& b);

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_BOX_H_
