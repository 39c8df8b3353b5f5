// Reading any box of a checkpointed tensor, whatever the shards it was saved
// in: every shard overlapping the box fills its part, through an
// EntryReader's bounded buffer with checksums checked. What consolidate,
// reshard and diff build on; none of them needs a process group.
#ifndef SHARDLIGHT_TOOLS_CKPT_TENSOR_REGIONS_H_
#define SHARDLIGHT_TOOLS_CKPT_TENSOR_REGIONS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sharded/checkpoint/format/checkpoint_reader.h"
#include "sharded/checkpoint/format/entry_reader.h"

namespace shardlight::tools::ckpt {

// The EntryReader buffer the tool's commands read through.
inline constexpr int64_t kReaderBufferBytes = int64_t{8} << 20;

// Fills `dst` (a contiguous CPU tensor of t's dtype holding the box at
// `dst_offsets` of the global tensor) from every overlapping shard. Errors
// name the key.
absl::Status FillRegion(sharded::checkpoint::CheckpointReader& reader, sharded::checkpoint::EntryReader& entries,
                        const sharded::checkpoint::IndexTensor& t, const at::Tensor& dst,
                        const std::vector<int64_t>& dst_offsets);

// The dim a sharded tensor was split along: the first dim some shard does
// not span whole; 0 when every shard spans every dim.
int64_t SavedShardDim(const sharded::checkpoint::IndexTensor& t);

}  // namespace shardlight::tools::ckpt

#endif  // SHARDLIGHT_TOOLS_CKPT_TENSOR_REGIONS_H_
