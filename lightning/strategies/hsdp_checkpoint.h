// HSDP's shards in checkpoints. A parameter (or optimizer state) that HSDP
// holds is a ShardedTensor on the shard group, and each of its shards lives
// on R replicas; a checkpoint is saved and loaded over the whole world. Its
// checkpoint view is a ShardedTensor over the world whose shards are the
// same pieces, shard i written by one replica -- the (i mod R)-th, so the
// writing is spread -- and sharing that rank's storage. The checkpoint save
// and resharding load then do the rest: keys and the stored layout are those
// of fsdp over S ranks, so the checkpoint resumes under ddp, fsdp or HSDP on
// any world size. After a load into the view, each writer sends its shard to
// the other replicas (FillReplicas).
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_HSDP_CHECKPOINT_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_HSDP_CHECKPOINT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sharded/mesh/device_mesh.h"
#include "sharded/sharded_tensor.h"
#include "sharded/state_dict.h"

namespace shardlight::lightning::fsdp_internal {

// `t` is on `mesh`'s dim-1 group (this rank's shard group). No communication.
absl::StatusOr<sharded::ShardedTensor> HsdpCheckpointView(const sharded::ShardedTensor& t,
                                                          const sharded::mesh::DeviceMesh& mesh);

// Collective over the mesh's dim-0 group (the replicate group): every local
// shard of `t` from its writer in the view. Unavailable naming `op`.
absl::Status FillReplicas(const sharded::ShardedTensor& t, const sharded::mesh::DeviceMesh& mesh,
                          const std::string& op);

}  // namespace shardlight::lightning::fsdp_internal

namespace shardlight::lightning {

// Replaces every ShardedTensor entry of `dict` that lives on `mesh`'s shard
// group (dim 1) with its checkpoint view; appends the tensors replaced to
// `replaced` when given (for FillReplicas after a load). No communication.
// What FsdpStrategy::Hybrid's run does at the Trainer's saves, for a caller
// that saves a TrainingStateDict itself.
absl::Status UseHsdpCheckpointViews(sharded::StateDict& dict, const sharded::mesh::DeviceMesh& mesh,
                                    std::vector<sharded::ShardedTensor>* replaced = nullptr);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_HSDP_CHECKPOINT_H_
