// DeviceMesh: the ranks of a process group arranged as an N-D grid (rank =
// sum coords[i] * stride[i]; row-major strides as created, a permutation of
// them for a Permuted view), with one sub-group per mesh dimension
// slice: the ranks that differ only in coordinate i share one group, created
// once per mesh and shared by every mesh tensor on it. A 2 x 4 mesh over 8
// ranks has 2 row groups of 4 (dim 1) and 4 column groups of 2 (dim 0).
//
// Creation is collective over the world group: ranks first agree
// (agreement.h) on the shape, so a mesh that does not match the world size, or
// ranks passing different shapes, gives every rank the same InvalidArgument.
#ifndef SHARDLIGHT_SHARDED_MESH_DEVICE_MESH_H_
#define SHARDLIGHT_SHARDED_MESH_DEVICE_MESH_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sharded/process_groups.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace shardlight::sharded::mesh {

using ProcessGroupPtr = c10::intrusive_ptr<c10d::ProcessGroup>;

// What a rank needs to build sub-groups: the store its world group was made
// from (or any store all ranks share), its rank and the world group itself.
struct MeshContext {
  c10::intrusive_ptr<c10d::Store> store;
  int rank = 0;
  int world_size = 1;
  ProcessGroupPtr world;
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
  // Where the sub-groups' Gloo binds: null device and loopback for ranks of
  // one host (the simulator); a real job passes its world group's
  // (lightning/cluster DistributedContext::gloo_options()).
  std::shared_ptr<gloo::transport::Device> gloo_device;
  std::string gloo_bind_address = "127.0.0.1";
};

// "2x4" -> {2, 4}; InvalidArgument naming the text when it is not sizes >= 1
// joined by 'x'.
absl::StatusOr<std::vector<int64_t>> ParseMeshShape(const std::string& text);

// Local check of a mesh shape against a world size (no communication).
absl::Status ValidateMeshShape(const std::vector<int64_t>& shape, int world_size);

class DeviceMesh {
 public:
  // Collective over ctx.world. `name` keys the sub-groups in the store: two
  // meshes created in one run need different names.
  static absl::StatusOr<std::shared_ptr<const DeviceMesh>> Create(const MeshContext& ctx,
                                                                  std::vector<int64_t> shape,
                                                                  const std::string& name = "mesh");

  int ndim() const { return static_cast<int>(shape_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t size(int dim) const { return shape_[dim]; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::string& name() const { return name_; }
  // This rank's coordinates.
  const std::vector<int64_t>& coords() const { return coords_; }
  std::vector<int64_t> CoordsOf(int rank) const;
  int RankAt(const std::vector<int64_t>& coords) const;
  // The sub-group along `dim` holding this rank; its rank there is coords()[dim].
  const ProcessGroupPtr& group(int dim) const { return groups_[dim]; }
  const ProcessGroupPtr& world() const { return world_; }
  // "2x4".
  std::string ShapeString() const;

  // No communication: the same ranks and sub-groups with the dims reordered
  // -- dim i of the result is dim `order[i]` of this mesh -- named
  // "<name>(dims order...)". Mesh tensors nest shards in mesh-dim order, so
  // a permuted view lays a tensor out in another nesting (FSDP x TP: each
  // tensor-parallel piece chunked again over the data-parallel ranks puts
  // the TP dim first). InvalidArgument when `order` is not a permutation of
  // the dims.
  absl::StatusOr<std::shared_ptr<const DeviceMesh>> Permuted(const std::vector<int>& order) const;

 private:
  DeviceMesh() = default;
  std::vector<int64_t> shape_;
  std::vector<int64_t> coords_;
  std::vector<int64_t> strides_;  // rank = sum coords[i] * strides_[i]
  int rank_ = 0;
  int world_size_ = 1;
  std::string name_;
  ProcessGroupPtr world_;
  std::vector<ProcessGroupPtr> groups_;
};

using MeshPtr = std::shared_ptr<const DeviceMesh>;

}  // namespace shardlight::sharded::mesh

#endif  // SHARDLIGHT_SHARDED_MESH_DEVICE_MESH_H_
