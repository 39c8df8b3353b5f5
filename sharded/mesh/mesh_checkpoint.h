// Mesh tensors in state dicts and checkpoints.
//
// A mesh tensor enters a StateDict as its checkpoint view: a ShardedTensor
// over the mesh's world group whose shards are the tensor's *distinct* boxes,
// each owned by one of the ranks that hold it and sharing that rank's storage.
// Replicas are thus written once, and the writing is spread: the k-th distinct
// box (in rank order of first appearance) is owned by its (k mod r)-th
// replica, not always the lowest rank. The existing checkpoint save and
// resharding load then do the rest, so a mesh checkpoint loads into any other
// mesh and placements, into a ShardedTensor, or into a dense tensor, and a
// checkpoint of ShardedTensors or dense tensors loads into a mesh tensor.
//
// Loading: insert ViewForLoad(t) under the key, LoadCheckpoint fills the
// owners' pieces in place, then CompleteLoad(t) copies each piece from its
// owner to the other ranks holding it.
#ifndef SHARDLIGHT_SHARDED_MESH_MESH_CHECKPOINT_H_
#define SHARDLIGHT_SHARDED_MESH_MESH_CHECKPOINT_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sharded/mesh/mesh_tensor.h"
#include "sharded/sharded_tensor.h"

namespace shardlight::sharded::mesh {

// No communication. FailedPrecondition when a placement is Partial (its
// addends are not the tensor's values: Redistribute to Replicate first).
absl::StatusOr<ShardedTensor> ViewForSave(const MeshTensor& t);
// No communication. Partial dims are filled as if Replicate; CompleteLoad
// zeroes Partial(sum) dims away from coordinate 0 (HoldsZerosForValue).
absl::StatusOr<ShardedTensor> ViewForLoad(const MeshTensor& t);
// Collective over the mesh's world group: after a load into ViewForLoad(t).
absl::Status CompleteLoad(const MeshTensor& t);

}  // namespace shardlight::sharded::mesh

#endif  // SHARDLIGHT_SHARDED_MESH_MESH_CHECKPOINT_H_
