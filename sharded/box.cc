#include "sharded/box.h"

#include <algorithm>

namespace shardlight::sharded {

Box Box::Whole(absl::Span<const int64_t> sizes) { return Box{Dims(sizes.size(), 0), Dims(sizes.begin(), sizes.end())}; }

int64_t Box::NumElements() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

std::optional<Box> Intersect(const Box& a, const Box& b) {
  const size_t n = a.offsets.size();
  Box out{Dims(n), Dims(n)};
  for (size_t d = 0; d < n; ++d) {
    const int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    const int64_t hi = std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]);
    if (hi <= lo) return std::nullopt;
    out.offsets[d] = lo;
    out.sizes[d] = hi - lo;
  }
  return out;
}

}  // namespace shardlight::sharded
