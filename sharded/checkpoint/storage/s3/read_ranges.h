// Which ranged GETs fetch the byte ranges a load announces for one object
// (File::WillRead). A GET costs a round trip and a request's fixed work on
// the server, far more than reading a few KiB more: ranges a small gap apart
// share one GET (the gap's bytes are fetched and dropped), and no GET is
// longer than a cap, which bounds the memory a fetched piece holds. A pure
// function, so that the rules are tested without a server.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_READ_RANGES_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_READ_RANGES_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace shardlight::sharded::checkpoint::s3 {

// Bytes [first, second), as the storage seam's ByteRange.
using ReadRange = std::pair<int64_t, int64_t>;

// The GETs that fetch every byte of `ranges` (any order; overlapping, empty
// and reversed ones allowed) clipped to [0, size): sorted, disjoint, none
// empty, none longer than `max_get_bytes` (at least 1). A range that starts
// at most `max_gap_bytes` (at least 0) after the GET before it ends joins
// that GET, as far as the cap allows; a range longer than the cap is cut.
// No byte is fetched twice, and no byte is fetched that lies neither in a
// range nor in a gap of at most `max_gap_bytes` between two.
std::vector<ReadRange> JoinReadRanges(std::vector<ReadRange> ranges, int64_t size, int64_t max_gap_bytes,
                                      int64_t max_get_bytes);

}  // namespace shardlight::sharded::checkpoint::s3

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_READ_RANGES_H_
