// Test helpers for device meshes: random mesh shapes, placements and sizes,
// and the dense reference the property tests compare against.
#ifndef SHARDLIGHT_SHARDED_MESH_MESH_TESTING_H_
#define SHARDLIGHT_SHARDED_MESH_MESH_TESTING_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sharded/mesh/device_mesh.h"
#include "sharded/mesh/mesh_tensor.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded::mesh::testing {

MeshContext ContextOf(const simulate::RankContext& ctx);

// A random 1-d to `max_dims`-d shape whose product is `world_size`.
std::vector<int64_t> RandomMeshShape(std::mt19937_64& rng, int world_size, int max_dims = 3);
// 0- to 3-d sizes in [0, 7] (zero sizes included).
std::vector<int64_t> RandomSizes(std::mt19937_64& rng);
// Partial dims get one random op (sum, avg, max, min) per list.
Placements RandomPlacements(std::mt19937_64& rng, int mesh_dims, int tensor_dims, bool allow_partial);

// This rank's local piece of `full` under `placements`, Partial dims split
// into parts that differ between ranks and reduce to the value by their op
// (all Partial dims of `placements` share one op, as RandomPlacements gives
// them): small integer offsets, exact in float, double and long.
at::Tensor LocalPieceOf(const at::Tensor& full, const DeviceMesh& mesh, const Placements& placements);

// `p` with every Partial placement replaced by Replicate (a saveable layout).
Placements WithoutPartial(Placements p);

// $TEST_TMPDIR/name (or /tmp/name).
std::string TestDir(const std::string& name);

// Meshes by shape, created on first use (collective: every rank asks for the
// same shapes in the same order).
class MeshCache {
 public:
  explicit MeshCache(MeshContext ctx) : ctx_(std::move(ctx)) {}
  absl::StatusOr<MeshPtr> Get(const std::vector<int64_t>& shape);

 private:
  MeshContext ctx_;
  std::map<std::vector<int64_t>, MeshPtr> meshes_;
};

}  // namespace shardlight::sharded::mesh::testing

#endif  // SHARDLIGHT_SHARDED_MESH_MESH_TESTING_H_
