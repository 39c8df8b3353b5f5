#include "sharded/checkpoint/storage/s3/read_ranges.h"

#include <algorithm>

namespace shardlight::sharded::checkpoint::s3 {

std::vector<ReadRange> JoinReadRanges(std::vector<ReadRange> ranges, int64_t size, int64_t max_gap_bytes,
                                      int64_t max_get_bytes) {
  const int64_t gap = std::max<int64_t>(0, max_gap_bytes);
  const int64_t cap = std::max<int64_t>(1, max_get_bytes);
  std::sort(ranges.begin(), ranges.end());
  std::vector<ReadRange> gets;
  for (const ReadRange& r : ranges) {
    int64_t at = std::max<int64_t>(r.first, 0);
    const int64_t end = std::min(r.second, size);
    if (end <= at) continue;
    if (!gets.empty()) {
      ReadRange& last = gets.back();
      // Ranges come by their start, so every byte from this one's start to
      // the end of the GETs so far is in them already: an overlap joins
      // (its gap is negative), and only what lies past `last` is added.
      if (end <= last.second) continue;
      if (at - last.second <= gap && at < last.first + cap) {
        last.second = std::min(end, last.first + cap);
        at = last.second;
      }
    }
    for (; at < end; at += cap) gets.emplace_back(at, std::min(end, at + cap));
  }
  return gets;
}

}  // namespace shardlight::sharded::checkpoint::s3
