// Shard and sharded-tensor metadata: which box of the global tensor each shard
// holds and where it lives, plus the tensor-wide properties.
//
// ShardedTensorMetadata::Validate() is the single check every entry point uses
// (factories, InitFromLocalShards, checkpoint load). It returns
// InvalidArgument naming the offending shard(s) when a shard's rank of dims
// differs from the tensor's, a shard leaves the bounds, two shards overlap, or
// the shards do not cover the tensor. Zero-size shards are legal.
#ifndef SHARDLIGHT_SHARDED_SHARD_METADATA_H_
#define SHARDLIGHT_SHARDED_SHARD_METADATA_H_

#include <c10/core/Layout.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sharded/box.h"
#include "sharded/placement.h"

namespace shardlight::sharded {

// A shard: its box of the global tensor and where it lives.
struct ShardMetadata : Box {
  ShardMetadata() = default;
  ShardMetadata(Box box, Placement where) : Box(std::move(box)), placement(std::move(where)) {}
  ShardMetadata(absl::Span<const int64_t> offsets, absl::Span<const int64_t> sizes, Placement where)
      : Box{Dims(offsets.begin(), offsets.end()), Dims(sizes.begin(), sizes.end())}, placement(std::move(where)) {}

  Placement placement;

  // "offsets [0, 4], sizes [2, 4], rank:1/cpu"
  std::string ToString() const;
  friend bool operator==(const ShardMetadata& a, const ShardMetadata& b) {
    return a.offsets == b.offsets && a.sizes == b.sizes && a.placement == b.placement;
  }
};

struct TensorProperties {
  c10::ScalarType dtype = c10::ScalarType::Float;
  bool requires_grad = false;
  c10::Layout layout = c10::kStrided;
  c10::MemoryFormat memory_format = c10::MemoryFormat::Contiguous;

  friend bool operator==(const TensorProperties& a, const TensorProperties& b) {
    return a.dtype == b.dtype && a.requires_grad == b.requires_grad && a.layout == b.layout &&
           a.memory_format == b.memory_format;
  }
};

// The dtypes a ShardedTensor may hold: every dtype of KnownDtypes()
// (dtype_table.h). Its data moves between ranks as bytes, so no collective
// restricts them.
bool IsSupportedDtype(c10::ScalarType dtype);

struct ShardedTensorMetadata {
  std::vector<int64_t> sizes;  // global sizes
  TensorProperties properties;
  std::vector<ShardMetadata> shards;

  int64_t NumElements() const;
  absl::Status Validate() const;
  // Indices into `shards` of the shards placed on `rank`, in order.
  std::vector<int> ShardsOnRank(int rank) const;
  // Sizes, dtype, requires_grad and every shard as text: ranks compare its
  // hash (stable_hash.h) to confirm they agree on a layout.
  std::string LayoutString() const;
};

// Formats a shape as "[2, 3]".
std::string ShapeToString(absl::Span<const int64_t> shape);

// Product of the sizes; InvalidArgument on negative sizes or int64 overflow.
absl::StatusOr<int64_t> CheckedNumElements(absl::Span<const int64_t> sizes);

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_SHARD_METADATA_H_
