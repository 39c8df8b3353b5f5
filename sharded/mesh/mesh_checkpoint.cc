#include "sharded/mesh/mesh_checkpoint.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sharded/box_exchange.h"
#include "sharded/placement.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::mesh {
namespace {

// Each distinct box of `t` with the ranks holding it, in order of first
// appearance over ranks 0..W-1; the owner is replica k mod r of box k.
struct DistinctBox {
  Box box;
  std::vector<int> replicas;
  int owner() const { return replicas[index % replicas.size()]; }
  size_t index = 0;
};

std::vector<DistinctBox> DistinctBoxes(const MeshTensor& t) {
  const DeviceMesh& mesh = *t.mesh();
  // Partial dims do not change a rank's box.
  std::vector<DistinctBox> boxes;
  for (int r = 0; r < mesh.world_size(); ++r) {
    Box b = MeshLocalBox(mesh.shape(), mesh.CoordsOf(r), t.placements(), t.sizes());
    bool found = false;
    for (auto& d : boxes) {
      if (d.box == b) {
        d.replicas.push_back(r);
        found = true;
        break;
      }
    }
    if (!found) boxes.push_back(DistinctBox{std::move(b), {r}, boxes.size()});
  }
  return boxes;
}

// The values of t's local piece, sharing its storage: a trainable piece
// (requires_grad, as the TP layers' parameters are) is viewed detached, so
// saving reads it and loading writes it like any other tensor.
at::Tensor Values(const MeshTensor& t) { return t.local().detach(); }

absl::StatusOr<ShardedTensor> View(const MeshTensor& t) {
  ShardedTensorMetadata meta;
  meta.sizes = t.sizes();
  meta.properties.dtype = t.dtype();
  std::vector<Shard> mine;
  for (const DistinctBox& d : DistinctBoxes(t)) {
    ShardMetadata m;
    static_cast<Box&>(m) = d.box;
    m.placement = Placement::Cpu(d.owner());
    if (d.owner() == t.mesh()->rank()) mine.push_back(Shard{Values(t), m});
    meta.shards.push_back(std::move(m));
  }
  return ShardedTensor::InitFromLocalShardsAndGlobalMetadata(std::move(mine), std::move(meta), t.mesh()->world());
}

}  // namespace

absl::StatusOr<ShardedTensor> ViewForSave(const MeshTensor& t) {
  for (const MeshPlacement& p : t.placements()) {
    if (p.is_partial()) {
      return absl::FailedPreconditionError(absl::StrCat("a mesh tensor with placements ",
                                                        PlacementsString(t.placements()),
                                                        " holds addends, not values: Redistribute it to "
                                                        "Replicate on its Partial dims before saving"));
    }
  }
  return View(t);
}

absl::StatusOr<ShardedTensor> ViewForLoad(const MeshTensor& t) { return View(t); }

absl::Status CompleteLoad(const MeshTensor& t) {
  const DeviceMesh& mesh = *t.mesh();
  std::vector<ExchangeBox> sources, destinations;
  for (const DistinctBox& d : DistinctBoxes(t)) {
    ExchangeBox s;
    static_cast<Box&>(s) = d.box;
    s.rank = d.owner();
    if (s.rank == mesh.rank()) s.tensor = Values(t);
    sources.push_back(s);
    for (int r : d.replicas) {
      if (r == d.owner()) continue;
      ExchangeBox x;
      static_cast<Box&>(x) = d.box;
      x.rank = r;
      if (r == mesh.rank()) x.tensor = Values(t);
      destinations.push_back(std::move(x));
    }
  }
  SL_RETURN_IF_ERROR(ExchangeBoxes(*mesh.world(), t.dtype(), sources, destinations));
  if (HoldsZerosForValue(t.placements(), mesh.coords())) {
    Values(t).zero_();
  }
  return absl::OkStatus();
}

}  // namespace shardlight::sharded::mesh
