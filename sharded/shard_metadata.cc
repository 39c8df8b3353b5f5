#include "sharded/shard_metadata.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/dtype_table.h"

namespace shardlight::sharded {
namespace {

constexpr int kMaxDims = 8;

std::string Describe(const ShardedTensorMetadata& m, int i) {
  return absl::StrCat("shard ", i, " (", m.shards[i].ToString(), ")");
}

bool BoxesOverlap(const ShardMetadata& a, const ShardMetadata& b, size_t skip_dim) {
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    if (d == skip_dim) continue;
    if (a.offsets[d] >= b.offsets[d] + b.sizes[d] || b.offsets[d] >= a.offsets[d] + a.sizes[d]) {
      return false;
    }
  }
  return true;
}

// The dim with the most distinct shard starts: sweeping along it keeps the
// open set small (one shard when a single dim is sharded, one slab in a grid).
int SweepDim(const ShardedTensorMetadata& m, const std::vector<int>& nonempty) {
  int best = 0;
  size_t best_count = 0;
  std::vector<int64_t> starts;
  for (size_t d = 0; d < m.sizes.size(); ++d) {
    starts.clear();
    for (int i : nonempty) starts.push_back(m.shards[i].offsets[d]);
    std::sort(starts.begin(), starts.end());
    const size_t count = std::unique(starts.begin(), starts.end()) - starts.begin();
    if (count > best_count) {
      best = static_cast<int>(d);
      best_count = count;
    }
  }
  return best;
}

// Sweep along `dim`: shards sorted by start; each is compared only with shards
// still open at its start, so no O(n^2) pass over 10k shards.
absl::Status CheckNoOverlap(const ShardedTensorMetadata& m, const std::vector<int>& nonempty,
                            int dim) {
  std::vector<int> order = nonempty;
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return m.shards[a].offsets[dim] < m.shards[b].offsets[dim];
  });
  std::vector<int> open;
  for (int i : order) {
    const ShardMetadata& s = m.shards[i];
    open.erase(std::remove_if(open.begin(), open.end(),
                              [&](int j) {
                                const ShardMetadata& o = m.shards[j];
                                return o.offsets[dim] + o.sizes[dim] <= s.offsets[dim];
                              }),
               open.end());
    for (int j : open) {
      if (BoxesOverlap(m.shards[j], s, dim)) {
        return absl::InvalidArgumentError(
            absl::StrCat(Describe(m, std::min(i, j)), " overlaps ", Describe(m, std::max(i, j))));
      }
    }
    open.push_back(i);
  }
  return absl::OkStatus();
}

}  // namespace

std::string ShapeToString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<int64_t> CheckedNumElements(absl::Span<const int64_t> sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) {
    if (s < 0) return absl::InvalidArgumentError(absl::StrCat("negative size in ", ShapeToString(sizes)));
    if (s != 0 && n > std::numeric_limits<int64_t>::max() / s) {
      return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeToString(sizes), " overflows int64"));
    }
    n *= s;
  }
  return n;
}

std::string ShardMetadata::ToString() const {
  return absl::StrCat("offsets ", ShapeToString(offsets), ", sizes ", ShapeToString(sizes), ", ",
                      placement.ToString());
}

bool IsSupportedDtype(c10::ScalarType dtype) { return FindDtype(dtype) != nullptr; }

int64_t ShardedTensorMetadata::NumElements() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

std::string ShardedTensorMetadata::LayoutString() const {
  std::string text = absl::StrCat(ShapeToString(sizes), " ", c10::toString(properties.dtype),
                                  properties.requires_grad ? " grad" : "");
  for (const ShardMetadata& s : shards) absl::StrAppend(&text, "|", s.ToString());
  return text;
}

std::vector<int> ShardedTensorMetadata::ShardsOnRank(int rank) const {
  std::vector<int> out;
  for (size_t i = 0; i < shards.size(); ++i) {
    if (shards[i].placement.rank == rank) out.push_back(static_cast<int>(i));
  }
  return out;
}

absl::Status ShardedTensorMetadata::Validate() const {
  if (sizes.size() > kMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor has ", sizes.size(), " dims; at most ", kMaxDims, " are supported"));
  }
  auto total = CheckedNumElements(sizes);
  if (!total.ok()) return absl::InvalidArgumentError(absl::StrCat("global sizes: ", total.status().message()));
  if (!IsSupportedDtype(properties.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ", c10::toString(properties.dtype),
                     " is not supported (not in sharded/dtype_table.h: quantized and bit dtypes are not)"));
  }
  if (shards.empty()) return absl::InvalidArgumentError("sharded tensor has no shards");
  std::vector<int> nonempty;
  int64_t covered = 0;
  bool excess = false;
  for (size_t i = 0; i < shards.size(); ++i) {
    const ShardMetadata& s = shards[i];
    const int idx = static_cast<int>(i);
    if (s.offsets.size() != sizes.size() || s.sizes.size() != sizes.size()) {
      return absl::InvalidArgumentError(absl::StrCat(Describe(*this, idx), " has ", s.offsets.size(), "-d offsets and ",
                                                     s.sizes.size(), "-d sizes; the tensor has ", sizes.size(), " dims"));
    }
    if (s.placement.rank < 0) {
      return absl::InvalidArgumentError(absl::StrCat(Describe(*this, idx), " has a negative rank"));
    }
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (s.offsets[d] < 0 || s.sizes[d] < 0 || s.offsets[d] > sizes[d] ||
          s.sizes[d] > sizes[d] - s.offsets[d]) {
        return absl::InvalidArgumentError(absl::StrCat(Describe(*this, idx), " is out of bounds in dim ", d,
                                                       " of global sizes ", ShapeToString(sizes)));
      }
    }
    const int64_t n = s.NumElements();  // in bounds, so at most the global volume
    if (n > 0) nonempty.push_back(idx);
    if (n > *total - covered) {
      excess = true;  // more elements than the tensor: an overlap the sweep names
      break;
    }
    covered += n;
  }
  if (!nonempty.empty()) {
    absl::Status overlap = CheckNoOverlap(*this, nonempty, SweepDim(*this, nonempty));
    if (!overlap.ok()) return overlap;
  }
  if (excess) return absl::InvalidArgumentError("shards hold more elements than the tensor");
  if (covered != *total) {
    return absl::InvalidArgumentError(absl::StrCat("shards cover ", covered, " of the ", *total,
                                                   " elements of global sizes ", ShapeToString(sizes),
                                                   ": there is a gap"));
  }
  return absl::OkStatus();
}

}  // namespace shardlight::sharded
