#include "sharded/mesh/mesh_exchange.h"

#include <algorithm>
#include <climits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sharded/collectives.h"
#include "sharded/status_macros.h"
#include "sharded/tensor_region.h"

namespace shardlight::sharded::mesh {
namespace {

// A box some ranks hold. Without Partial placements two ranks' boxes are
// equal or disjoint, so the distinct boxes partition the tensor.
struct Distinct {
  Box box;
  std::vector<int> holders;
};

int DifferingCoords(const DeviceMesh& mesh, int a, int b) {
  const std::vector<int64_t> ca = mesh.CoordsOf(a), cb = mesh.CoordsOf(b);
  int n = 0;
  for (size_t i = 0; i < ca.size(); ++i) n += ca[i] != cb[i];
  return n;
}

// Who gives rank `dest` its part of distinct box `s`: itself when it holds
// it, else the nearest holder on the mesh (ties spread by dest and box).
int HolderFor(const DeviceMesh& mesh, const Distinct& d, size_t s, int dest) {
  if (std::find(d.holders.begin(), d.holders.end(), dest) != d.holders.end()) return dest;
  int best = INT_MAX;
  std::vector<int> nearest;
  for (int h : d.holders) {
    const int diff = DifferingCoords(mesh, h, dest);
    if (diff < best) nearest.clear();
    if (diff <= best) {
      best = diff;
      nearest.push_back(h);
    }
  }
  return nearest[(static_cast<size_t>(dest) + s) % nearest.size()];
}

}  // namespace

absl::StatusOr<at::Tensor> ExchangeOnMesh(const DeviceMesh& mesh, const std::vector<int64_t>& sizes,
                                          const at::Tensor& local, const Placements& from, const Placements& to,
                                          RedistributeStats* stats) {
  for (const Placements* p : {&from, &to}) {
    for (const MeshPlacement& x : *p) {
      if (x.is_partial()) {
        return absl::InvalidArgumentError(
            absl::StrCat("a mesh exchange moves values, not addends: ", PlacementsString(*p), " has a Partial"));
      }
    }
  }
  const int world = mesh.world_size(), me = mesh.rank();
  // Step 1: every rank's old and new box (the same plan on every rank).
  std::vector<Box> dest(world);
  std::vector<Distinct> distinct;
  for (int r = 0; r < world; ++r) {
    Box held = MeshLocalBox(mesh.shape(), mesh.CoordsOf(r), from, sizes);
    dest[r] = MeshLocalBox(mesh.shape(), mesh.CoordsOf(r), to, sizes);
    auto it = std::find_if(distinct.begin(), distinct.end(), [&](const Distinct& d) { return d.box == held; });
    if (it == distinct.end()) {
      distinct.push_back(Distinct{std::move(held), {r}});
    } else {
      it->holders.push_back(r);
    }
  }
  const Box mine_from = MeshLocalBox(mesh.shape(), mesh.coords(), from, sizes);
  const Box& mine_to = dest[me];
  at::Tensor out = at::empty(mine_to.sizes, local.options());
  const int64_t elem = local.element_size();
  // Step 2: what this rank copies, sends (by destination, then box) and
  // receives (by holder, then box).
  std::vector<at::Tensor> parts;
  std::vector<int64_t> send_counts(world, 0), recv_counts(world, 0);
  std::vector<std::pair<int, Box>> incoming;  // holder, piece
  for (int r = 0; r < world; ++r) {
    for (size_t s = 0; s < distinct.size(); ++s) {
      const std::optional<Box> piece = Intersect(dest[r], distinct[s].box);
      if (!piece || piece->NumElements() == 0) continue;
      const int holder = HolderFor(mesh, distinct[s], s, r);
      const int64_t bytes = piece->NumElements() * elem;
      if (holder == me && r == me) {
        RegionView(out, mine_to, *piece).copy_(RegionView(local, mine_from, *piece));
        stats->bytes_copied_locally += bytes;
      } else if (holder == me) {
        parts.push_back(RegionView(local, mine_from, *piece).contiguous().reshape({-1}));
        send_counts[r] += bytes;
      } else if (r == me) {
        incoming.emplace_back(holder, *piece);
        recv_counts[holder] += bytes;
      }
    }
  }
  std::stable_sort(incoming.begin(), incoming.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  // Step 3: one all-to-all, then each piece into place.
  at::Tensor send = parts.empty() ? at::empty({0}, local.options()) : at::cat(parts);
  int64_t total = 0;
  for (int64_t c : recv_counts) total += c;
  at::Tensor recv = at::empty({total}, at::TensorOptions().dtype(at::kByte));
  SL_RETURN_IF_ERROR(AllToAllBytes(*mesh.world(), send.view(at::kByte), send_counts, recv, recv_counts));
  int64_t offset = 0;
  for (const auto& [holder, piece] : incoming) {
    const int64_t bytes = piece.NumElements() * elem;
    RegionView(out, mine_to, piece).copy_(recv.narrow(0, offset, bytes).view(local.scalar_type()).view(piece.sizes));
    offset += bytes;
  }
  for (int64_t c : send_counts) stats->bytes_sent += c;
  stats->bytes_received += total;
  ++stats->steps;
  return out;
}

}  // namespace shardlight::sharded::mesh
