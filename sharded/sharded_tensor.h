// ShardedTensor: a global tensor split into shards across the ranks of a
// c10d::ProcessGroup; each rank holds only its own shards.
//
// The same code runs on Gloo threads (the simulator), Gloo processes and NCCL.
// Collective entry points (InitFromLocalShards, Gather, FullTensor, Reshard,
// the factories in factories.h) must be called by every rank of the group;
// they return the same error on every rank for inconsistent input, and
// Unavailable naming the collective when the group fails (a peer died, a
// timeout) -- never a hang beyond the group's timeout. Each of them first
// agrees on a verdict (agreement.h) and then moves data (box_exchange.h).
//
// Invariants, held by construction: a ShardedTensor always has a process
// group, validated metadata, and exactly this rank's shards of it, in
// metadata order, each a tensor of its box's sizes and the tensor's dtype.
// The only ways to make one are the static constructors below, the factories
// and Reshard; the shard list is read-only. Shard *values* are written in
// place through each Shard::tensor (a handle sharing the shard's storage:
// copy_, in-place ops); its layout cannot change. As both are immutable,
// copies of a ShardedTensor share them: a copy costs two reference counts,
// whatever the number of shards (a state dict's snapshot copies every one).
#ifndef SHARDLIGHT_SHARDED_SHARDED_TENSOR_H_
#define SHARDLIGHT_SHARDED_SHARDED_TENSOR_H_

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sharded/box_exchange.h"
#include "sharded/shard_metadata.h"
#include "sharded/sharding_spec.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::sharded {

// One local piece of a ShardedTensor: the data and where it sits globally.
struct Shard {
  at::Tensor tensor;
  ShardMetadata metadata;
};

class ShardedTensor {
 public:
  using ProcessGroupPtr = c10::intrusive_ptr<c10d::ProcessGroup>;

  // Collective. Ranks exchange their local shard metadata and validate the
  // whole: every rank gets the same InvalidArgument when a local tensor does
  // not match its metadata, a shard is placed on another rank, dtypes or
  // requires_grad differ between ranks, global sizes differ, or the shards
  // overlap or leave a gap.
  static absl::StatusOr<ShardedTensor> InitFromLocalShards(std::vector<Shard> local_shards,
                                                           const std::vector<int64_t>& global_sizes,
                                                           ProcessGroupPtr pg);

  // No communication: checks `metadata` (Validate, ranks within the group)
  // and that this rank's shards are exactly its shards in `metadata`, in
  // order; trusts the caller that the other ranks agree.
  static absl::StatusOr<ShardedTensor> InitFromLocalShardsAndGlobalMetadata(
      std::vector<Shard> local_shards, ShardedTensorMetadata metadata, ProcessGroupPtr pg);

  // Collective. Shards `full` (significant on `src` only; ignored elsewhere)
  // by `spec`. Only the bytes each rank owns are sent to it.
  static absl::StatusOr<ShardedTensor> Scatter(const at::Tensor& full, int src,
                                               const ShardingSpec& spec,
                                               const std::vector<int64_t>& global_sizes,
                                               const TensorProperties& properties,
                                               ProcessGroupPtr pg);

  // Copies share the layout; a move is a copy too, so a moved-from
  // ShardedTensor stays whole (no null layout behind the accessors).
  ShardedTensor(const ShardedTensor&) = default;
  ShardedTensor& operator=(const ShardedTensor&) = default;

  const std::vector<Shard>& local_shards() const { return layout_->local_shards; }
  const ShardedTensorMetadata& metadata() const { return layout_->metadata; }
  const std::vector<int64_t>& sizes() const { return layout_->metadata.sizes; }
  c10::ScalarType dtype() const { return layout_->metadata.properties.dtype; }
  const ProcessGroupPtr& process_group() const { return pg_; }

  // No communication: the same layout and group, zero values, with the given
  // requires_grad (e.g. an optimizer's state for this tensor).
  ShardedTensor ZerosLike(bool requires_grad) const;

  // Collective. The full tensor on rank `dst` (on FullTensor's device);
  // std::nullopt on other ranks.
  absl::StatusOr<std::optional<at::Tensor>> Gather(int dst) const;
  // Collective. The full tensor on every rank, on the device of its own
  // shards (a rank with none: its placement's, else the first shard's).
  absl::StatusOr<at::Tensor> FullTensor() const;
  // Collective. The same global values laid out by `spec`; each element moves
  // at most once, and not at all when its owner does not change.
  absl::StatusOr<ShardedTensor> Reshard(const ShardingSpec& spec, ExchangeStats* stats = nullptr) const;

 private:
  c10::Device FullTensorDevice() const;
  // The immutable part, shared by copies.
  struct Layout {
    ShardedTensorMetadata metadata;
    std::vector<Shard> local_shards;
  };

  ShardedTensor(ShardedTensorMetadata metadata, std::vector<Shard> local_shards, ProcessGroupPtr pg)
      : layout_(std::make_shared<const Layout>(Layout{std::move(metadata), std::move(local_shards)})),
        pg_(std::move(pg)) {}

  // This rank's shards as exchange sources; every other shard without data.
  std::vector<ExchangeBox> SourceBoxes() const;

  std::shared_ptr<const Layout> layout_;  // never null
  ProcessGroupPtr pg_;
};

// The verdict AgreeOn (agreement.h) compares: the layout's hash, or its error.
absl::StatusOr<uint64_t> LayoutHash(const absl::StatusOr<ShardedTensorMetadata>& metadata);

// Uninitialised tensors for every shard of `metadata` placed on `rank`.
std::vector<Shard> AllocateLocalShards(const ShardedTensorMetadata& metadata, int rank);

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_SHARDED_TENSOR_H_
