#include "tools/ckpt/tensor_regions.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "sharded/box.h"
#include "sharded/checkpoint/format/names.h"

namespace shardlight::tools::ckpt {

using sharded::checkpoint::IndexShard;

absl::Status FillRegion(sharded::checkpoint::CheckpointReader& reader, sharded::checkpoint::EntryReader& entries,
                        const sharded::checkpoint::IndexTensor& t, const at::Tensor& dst,
                        const std::vector<int64_t>& dst_offsets) {
  const sharded::Box box{sharded::Dims(dst_offsets.begin(), dst_offsets.end()),
                         sharded::Dims(dst.sizes().begin(), dst.sizes().end())};
  for (const IndexShard& sh : t.shards) {
    if (sh.NumElements() == 0) continue;
    std::optional<sharded::Box> region = sharded::Intersect(sh, box);
    if (!region) continue;
    auto f = reader.OpenShard(t, sh, t.key);
    if (!f.ok()) return f.status();
    absl::Status c = entries.Copy(reader.SourceOf(t, sh, *f), dst, dst_offsets, region->offsets, region->sizes);
    if (!c.ok()) {
      return absl::Status(c.code(), absl::StrCat("key ", sharded::checkpoint::Quote(t.key), ": ", c.message()));
    }
  }
  return absl::OkStatus();
}

int64_t SavedShardDim(const sharded::checkpoint::IndexTensor& t) {
  for (size_t d = 0; d < t.shape.size(); ++d) {
    for (const IndexShard& sh : t.shards) {
      if (sh.offsets[d] != 0 || sh.sizes[d] != t.shape[d]) return static_cast<int64_t>(d);
    }
  }
  return 0;
}

}  // namespace shardlight::tools::ckpt
