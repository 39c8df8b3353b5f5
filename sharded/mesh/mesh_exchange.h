// One exchange over a mesh's world group between two Partial-free layouts:
// how Redistribute moves values when more than one mesh dim changes or two
// mesh dims shard the same tensor dim (nested sharding), where going one mesh
// dim at a time could gather data that a later step slices away.
//
// Every rank receives exactly the elements of its new piece that it did not
// hold -- the minimum -- each from one holder: itself when it holds it (a
// local copy), else the holder that shares the most mesh coordinates with it
// (ties spread over the holders). One variable-size all-to-all.
#ifndef SHARDLIGHT_SHARDED_MESH_MESH_EXCHANGE_H_
#define SHARDLIGHT_SHARDED_MESH_MESH_EXCHANGE_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "sharded/mesh/device_mesh.h"
#include "sharded/mesh/mesh_tensor.h"

namespace shardlight::sharded::mesh {

// Collective over mesh.world(). `local` is this rank's piece under `from`;
// returns its piece under `to`. Neither layout may hold a Partial placement
// (InvalidArgument, before any communication: the caller has agreed on both).
absl::StatusOr<at::Tensor> ExchangeOnMesh(const DeviceMesh& mesh, const std::vector<int64_t>& sizes,
                                          const at::Tensor& local, const Placements& from, const Placements& to,
                                          RedistributeStats* stats);

}  // namespace shardlight::sharded::mesh

#endif  // SHARDLIGHT_SHARDED_MESH_MESH_EXCHANGE_H_
