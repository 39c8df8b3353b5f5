#include "sharded/mesh/mesh_testing.h"

#include "absl/strings/str_cat.h"
#include <algorithm>
#include <cstdlib>

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
  const auto op = static_cast<PartialOp>(rng() % 4);  // one op for the list's Partial dims
  for (int i = 0; i < mesh_dims; ++i) {
    const int kinds = allow_partial ? 3 : 2;
    const int k = static_cast<int>(rng() % kinds);
    if (k == 0 && tensor_dims > 0) {
      p.push_back(MeshPlacement::Shard(static_cast<int64_t>(rng() % tensor_dims)));
    } else if (k == 2) {
      p.push_back(MeshPlacement::Partial(op));
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
  PartialOp op = PartialOp::kSum;
  for (int i = 0; i < mesh.ndim(); ++i) {
    if (!placements[i].is_partial()) continue;
    index = index * mesh.size(i) + mesh.coords()[i];
    count *= mesh.size(i);
    op = placements[i].op;
  }
  if (count == 1) return piece;
  // Offset k > 0 is 2k + (element position mod 3).
  at::Tensor pattern =
      at::arange(piece.numel(), at::TensorOptions().dtype(at::kLong)).remainder(3).reshape(piece.sizes());
  auto offset = [&](int64_t k) { return (pattern + 2 * k).to(piece.scalar_type()); };
  switch (op) {
    case PartialOp::kSum:  // addend k > 0 is the offset; addend 0 the rest
      if (index > 0) return offset(index);
      for (int64_t k = 1; k < count; ++k) piece = piece - offset(k);
      return piece;
    case PartialOp::kAvg:  // the value plus offsets that cancel along each Partial dim (exact means)
      for (int i = 0; i < mesh.ndim(); ++i) {
        if (!placements[i].is_partial()) continue;
        piece = piece + offset(i + 1) * (mesh.coords()[i] == 0 ? 1 - mesh.size(i) : 1);
      }
      return piece;
    case PartialOp::kMax:  // the value at index 0, less elsewhere
      return index == 0 ? piece : piece - offset(index);
    case PartialOp::kMin:
      return index == 0 ? piece : piece + offset(index);
  }
  return piece;
}

Placements WithoutPartial(Placements p) {
  for (auto& x : p) {
    if (x.is_partial()) x = MeshPlacement::Replicate();
  }
  return p;
}

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp ? tmp : "/tmp", "/", name);
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
