// Box: an axis-aligned block of a global tensor (offsets and sizes per dim).
// The one value type for "which part of the tensor": shard metadata, the
// checkpoint index, the load planner and the box exchange all build on it.
// No LibTorch here, so offline tools can use it without the collectives.
#ifndef SHARDLIGHT_SHARDED_BOX_H_
#define SHARDLIGHT_SHARDED_BOX_H_

#include <cstdint>
#include <optional>
#include <vector>

namespace shardlight::sharded {

struct Box {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;

  // The whole of a tensor of `sizes`: zero offsets.
  static Box Whole(const std::vector<int64_t>& sizes);
  // The product of the sizes (1 for a 0-d box).
  int64_t NumElements() const;

  friend bool operator==(const Box& a, const Box& b) { return a.offsets == b.offsets && a.sizes == b.sizes; }
};

// The common part of two boxes of the same rank of dims; nullopt when it is
// empty. Two 0-d boxes intersect in their one element.
std::optional<Box> Intersect(const Box& a, const Box& b);

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_BOX_H_
