#include "sharded/mesh/mesh_testing.h"

#include "absl/strings/str_cat.h"
#include <algorithm>

namespace shardlight::sharded::mesh::testing {

MeshContext ContextOf(const simulate::RankContext& ctx) {
  MeshContext m;
  m.store = ctx.store;
  m.rank = ctx.rank;
  m.world_size = ctx.world_size;
  m.world = ctx.pg;
  m.timeout = std::chrono::seconds(20);
  return m;
}

std::vector<int64_t> RandomMeshShape(std::mt19937_64& rng, int world_size, int max_dims) {
  const int dims = 1 + static_cast<int>(rng() % max_dims);
  std::vector<int64_t> shape(dims, 1);
  int64_t left = world_size;
  for (int i = 0; i < dims - 1; ++i) {
    std::vector<int64_t> divisors;
    for (int64_t d = 1; d <= left; ++d) {
      if (left % d == 0) divisors.push_back(d);
    }
    shape[i] = divisors[rng() % divisors.size()];
    left /= shape[i];
  }
  shape[dims - 1] = left;
  std::shuffle(shape.begin(), shape.end(), rng);
  return shape;
}

std::vector<int64_t> RandomSizes(std::mt19937_64& rng) {
  const int dims = static_cast<int>(rng() % 4);
  std::vector<int64_t> sizes(dims);
  for (auto& s : sizes) s = static_cast<int64_t>(rng() % 8);
  return sizes;
}

Placements RandomPlacements(std::mt19937_64& rng, int mesh_dims, int tensor_dims, bool allow_partial) {
  Placements p;
  for (int i = 0; i < mesh_dims; ++i) {
    const int kinds = allow_partial ? 3 : 2;
    const int k = static_cast<int>(rng() % kinds);
    if (k == 0 && tensor_dims > 0) {
      p.push_back(MeshPlacement::Shard(static_cast<int64_t>(rng() % tensor_dims)));
    } else if (k == 2) {
      p.push_back(MeshPlacement::Partial());
    } else {
      p.push_back(MeshPlacement::Replicate());
    }
  }
  return p;
}

at::Tensor LocalPieceOf(const at::Tensor& full, const DeviceMesh& mesh, const Placements& placements) {
  const std::vector<int64_t> sizes = full.sizes().vec();
  const Box box = MeshLocalBox(mesh.shape(), mesh.coords(), placements, sizes);
  at::Tensor piece = full;
  for (size_t d = 0; d < sizes.size(); ++d) piece = piece.narrow(d, box.offsets[d], box.sizes[d]);
  piece = piece.clone(at::MemoryFormat::Contiguous);
  // Linear index of this rank among the Partial dims, and their count.
  int64_t index = 0, count = 1;
  for (int i = 0; i < mesh.ndim(); ++i) {
    if (!placements[i].is_partial()) continue;
    index = index * mesh.size(i) + mesh.coords()[i];
    count *= mesh.size(i);
  }
  if (count == 1) return piece;
  // Addend k > 0 is 2k + (element position mod 3); addend 0 is the rest.
  at::Tensor pattern =
      at::arange(piece.numel(), at::TensorOptions().dtype(at::kLong)).remainder(3).reshape(piece.sizes());
  auto addend = [&](int64_t k) { return (pattern + 2 * k).to(piece.scalar_type()); };
  if (index > 0) return addend(index);
  for (int64_t k = 1; k < count; ++k) piece = piece - addend(k);
  return piece;
}

absl::StatusOr<MeshPtr> MeshCache::Get(const std::vector<int64_t>& shape) {
  auto it = meshes_.find(shape);
  if (it != meshes_.end()) return it->second;
  auto mesh = DeviceMesh::Create(ctx_, shape, absl::StrCat("cache", meshes_.size()));
  if (!mesh.ok()) return mesh.status();
  meshes_[shape] = *mesh;
  return *mesh;
}

}  // namespace shardlight::sharded::mesh::testing
