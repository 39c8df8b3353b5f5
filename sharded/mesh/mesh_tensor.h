// MeshTensor: a global tensor laid out on a DeviceMesh with one placement per
// mesh dimension, with DTensor's semantics:
//   Shard(d)    the tensor (as left by the earlier mesh dims) is split along
//               tensor dim d over that mesh dim, as torch.chunk splits it
//               (uneven, trailing pieces may be empty);
//   Replicate   every rank along that mesh dim holds the same piece;
//   Partial     the ranks along that mesh dim hold parts whose reduction is
//               the piece: Partial(sum) addends, Partial(avg) values whose
//               mean it is, Partial(max) / Partial(min) values whose
//               maximum / minimum it is.
// Mesh dims apply in order, so two mesh dims sharding one tensor dim nest.
//
// Collective entry points (FromLocal, the factories, Redistribute,
// FullTensor, FromShardedTensor) agree on a verdict over the mesh's world
// group first (agreement.h): inconsistent placements, sizes or meshes give
// every rank the same InvalidArgument, naming the failing rank.
#ifndef SHARDLIGHT_SHARDED_MESH_MESH_TENSOR_H_
#define SHARDLIGHT_SHARDED_MESH_MESH_TENSOR_H_

#include <ATen/ATen.h>
#include <c10/core/Scalar.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sharded/box.h"
#include "sharded/mesh/device_mesh.h"
#include "sharded/sharded_tensor.h"

namespace shardlight::sharded::mesh {

// How a Partial mesh dim's parts reduce to the value.
enum class PartialOp { kSum, kAvg, kMax, kMin };

struct MeshPlacement {
  enum class Kind { kShard, kReplicate, kPartial };
  Kind kind = Kind::kReplicate;
  int64_t dim = 0;                 // kShard only
  PartialOp op = PartialOp::kSum;  // kPartial only

  static MeshPlacement Shard(int64_t dim) { return {Kind::kShard, dim}; }
  static MeshPlacement Replicate() { return {Kind::kReplicate, 0}; }
  static MeshPlacement Partial(PartialOp op = PartialOp::kSum) { return {Kind::kPartial, 0, op}; }
  bool is_shard() const { return kind == Kind::kShard; }
  bool is_replicate() const { return kind == Kind::kReplicate; }
  bool is_partial() const { return kind == Kind::kPartial; }
  // "Shard(1)", "Replicate()", "Partial(sum)", "Partial(avg)", "Partial(max)", "Partial(min)".
  std::string ToString() const;
  friend bool operator==(const MeshPlacement& a, const MeshPlacement& b) {
    return a.kind == b.kind && (a.kind != Kind::kShard || a.dim == b.dim) &&
           (a.kind != Kind::kPartial || a.op == b.op);
  }
  friend bool operator!=(const MeshPlacement& a, const MeshPlacement& b) { return !(a == b); }
};

using Placements = std::vector<MeshPlacement>;
std::string PlacementsString(const Placements& placements);

// Local: placements fit the mesh's rank of dims and the tensor's.
absl::Status ValidatePlacements(const std::vector<int64_t>& mesh_shape, const Placements& placements,
                                const std::vector<int64_t>& global_sizes);

// A local check as the verdict AgreeOn compares: its error, or a fingerprint
// of 0 to be replaced by the caller.
inline absl::StatusOr<uint64_t> AsVerdict(const absl::Status& status) {
  if (!status.ok()) return status;
  return uint64_t{0};
}

// Whether the rank at `coords` holds zeros when a value (a full tensor, a
// factory's, a loaded one) is laid out by `placements`: away from coordinate
// 0 on a Partial(sum) dim. Partial(avg/max/min) parts are the value itself.
bool HoldsZerosForValue(const Placements& placements, const std::vector<int64_t>& coords);

// The box of the global tensor that the rank at `coords` holds.
Box MeshLocalBox(const std::vector<int64_t>& mesh_shape, const std::vector<int64_t>& coords,
                 const Placements& placements, const std::vector<int64_t>& global_sizes);

// What one Redistribute moved for this rank. Box exchanges (all-gathers,
// all-to-alls, reduce-scatters) count exact bytes; an all-reduce counts what a
// bandwidth-optimal one sends, 2 (n - 1) / n of the tensor.
struct RedistributeStats {
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t bytes_copied_locally = 0;
  int steps = 0;  // per-mesh-dim transitions performed
};

class MeshTensor {
 public:
  // Collective: wraps this rank's piece; every rank checks its local tensor
  // has its box's sizes, and ranks agree on sizes, dtype and placements.
  static absl::StatusOr<MeshTensor> FromLocal(at::Tensor local, MeshPtr mesh, Placements placements,
                                              std::vector<int64_t> global_sizes);
  // No communication, for a layout every rank already agreed on (a strategy
  // relaying out the members it was handed): wraps `local` itself -- the
  // same variable, not a copy, so a module that reads the member's local()
  // keeps reading it. InvalidArgument when the placements do not fit the
  // mesh and sizes, `local` is undefined or not contiguous, or its sizes are
  // not this rank's box.
  static absl::StatusOr<MeshTensor> FromLocalAgreed(at::Tensor local, MeshPtr mesh, Placements placements,
                                                    std::vector<int64_t> global_sizes);
  // Collective: `full` (the same on every rank) laid out by `placements`;
  // Partial(sum) dims keep the values at coordinate 0 and zeros elsewhere,
  // the other Partial ops the values everywhere.
  static absl::StatusOr<MeshTensor> Distribute(const at::Tensor& full, MeshPtr mesh, Placements placements);
  // Collective: a ShardedTensor whose shards are a torch.chunk split along one
  // dim, shard i on rank i (ChunkShardingSpec::OnRanks), as a 1-D mesh tensor
  // with Shard(d) on `mesh` (1-D, over the same ranks).
  static absl::StatusOr<MeshTensor> FromShardedTensor(const ShardedTensor& st, MeshPtr mesh);

  const at::Tensor& local() const { return local_; }
  const MeshPtr& mesh() const { return mesh_; }
  const Placements& placements() const { return placements_; }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  c10::ScalarType dtype() const { return local_.scalar_type(); }
  Box LocalBox() const;

  // No communication (the layout is already agreed): a tensor of the same
  // mesh, placements and sizes whose local piece is uninitialized memory.
  MeshTensor EmptyLike() const {
    return MeshTensor(at::empty_like(local_, at::MemoryFormat::Contiguous), mesh_, placements_, sizes_);
  }

  // Collective: the same global values laid out by `placements`. One mesh
  // dim at a time, each on its sub-group, except between Partial-free layouts
  // that differ in several mesh dims or nest two mesh dims on one tensor dim:
  // those are one exchange on the whole mesh (mesh_exchange.h). Without
  // Partial, every rank receives only what it lacked (the minimum).
  absl::StatusOr<MeshTensor> Redistribute(const Placements& placements, RedistributeStats* stats = nullptr) const;
  // Collective: the full tensor on every rank.
  absl::StatusOr<at::Tensor> FullTensor() const;
  // Collective: a 1-D mesh with Shard(d) as a ShardedTensor over the mesh's
  // world group (shares storage with local()).
  absl::StatusOr<ShardedTensor> ToShardedTensor() const;

 private:
  friend absl::StatusOr<MeshTensor> MeshFactory(MeshPtr mesh, Placements placements, std::vector<int64_t> sizes,
                                                const struct MeshFactoryOptions& options);
  MeshTensor(at::Tensor local, MeshPtr mesh, Placements placements, std::vector<int64_t> sizes)
      : local_(std::move(local)),
        mesh_(std::move(mesh)),
        placements_(std::move(placements)),
        sizes_(std::move(sizes)) {}

  at::Tensor local_;
  MeshPtr mesh_;
  Placements placements_;
  std::vector<int64_t> sizes_;
};

enum class MeshInit { kEmpty, kZeros, kOnes, kFull, kRand, kRandn };

struct MeshFactoryOptions {
  c10::ScalarType dtype = c10::ScalarType::Float;
  MeshInit init = MeshInit::kZeros;
  c10::Scalar value = 0;  // kFull
  uint64_t seed = 0;      // kRand, kRandn: values by global index (global_random.h)
};

// Collective. Rand/Randn give the same global tensor on any mesh and
// placements (Partial dims as in Distribute).
absl::StatusOr<MeshTensor> MeshFactory(MeshPtr mesh, Placements placements, std::vector<int64_t> sizes,
                                       const MeshFactoryOptions& options);

}  // namespace shardlight::sharded::mesh

#endif  // SHARDLIGHT_SHARDED_MESH_MESH_TENSOR_H_
