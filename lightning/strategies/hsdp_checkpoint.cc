#include "lightning/strategies/hsdp_checkpoint.h"

#include <utility>
#include <vector>

#include "sharded/collectives.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::fsdp_internal {
namespace {

// The replicate coordinate of shard `shard_rank`'s writer.
int64_t WriterOf(int shard_rank, const sharded::mesh::DeviceMesh& mesh) { return shard_rank % mesh.size(0); }

}  // namespace

absl::StatusOr<sharded::ShardedTensor> HsdpCheckpointView(const sharded::ShardedTensor& t,
                                                          const sharded::mesh::DeviceMesh& mesh) {
  sharded::ShardedTensorMetadata metadata = t.metadata();
  for (sharded::ShardMetadata& shard : metadata.shards) {
    shard.placement.rank = mesh.RankAt({WriterOf(shard.placement.rank, mesh), shard.placement.rank});
  }
  std::vector<sharded::Shard> local;
  for (const sharded::Shard& shard : t.local_shards()) {
    const int shard_rank = shard.metadata.placement.rank;
    if (WriterOf(shard_rank, mesh) != mesh.coords()[0]) continue;
    sharded::Shard mine = shard;  // shares the storage
    mine.metadata.placement.rank = mesh.rank();
    local.push_back(std::move(mine));
  }
  return sharded::ShardedTensor::InitFromLocalShardsAndGlobalMetadata(std::move(local), std::move(metadata),
                                                                      mesh.world());
}

absl::Status FillReplicas(const sharded::ShardedTensor& t, const sharded::mesh::DeviceMesh& mesh,
                          const std::string& op) {
  c10d::ProcessGroup& replicate = *mesh.group(0);
  if (replicate.getSize() == 1) return absl::OkStatus();
  for (const sharded::Shard& shard : t.local_shards()) {
    if (shard.tensor.numel() == 0) continue;  // the same on every replica: none sends
    std::vector<at::Tensor> tensors = {shard.tensor};
    c10d::BroadcastOptions options;
    options.rootRank = static_cast<int>(WriterOf(shard.metadata.placement.rank, mesh));
    SL_RETURN_IF_ERROR(
        sharded::RunCollective(replicate, op, [&] { return replicate.broadcast(tensors, options); }));
  }
  return absl::OkStatus();
}

}  // namespace shardlight::lightning::fsdp_internal

namespace shardlight::lightning {

absl::Status UseHsdpCheckpointViews(sharded::StateDict& dict, const sharded::mesh::DeviceMesh& mesh,
                                    std::vector<sharded::ShardedTensor>* replaced) {
  std::vector<std::pair<std::string, sharded::ShardedTensor>> held;
  for (const auto& [key, value] : dict.entries()) {
    const auto* st = std::get_if<sharded::ShardedTensor>(&value);
    if (st != nullptr && st->process_group() == mesh.group(1)) held.emplace_back(key, *st);
  }
  for (auto& [key, st] : held) {
    SL_ASSIGN_OR_RETURN(sharded::ShardedTensor view, fsdp_internal::HsdpCheckpointView(st, mesh));
    dict.Set(key, std::move(view));
    if (replaced != nullptr) replaced->push_back(std::move(st));
  }
  return absl::OkStatus();
}

}  // namespace shardlight::lightning
