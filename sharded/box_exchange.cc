#include "sharded/box_exchange.h"

#include <ATen/core/grad_mode.h>

#include <optional>

#include "sharded/collectives.h"
#include "sharded/status_macros.h"
#include "sharded/tensor_region.h"

namespace shardlight::sharded {

namespace {

// One overlap between a source and a destination box.
struct Transfer {
  int src;  // index into sources
  int dst;  // index into destinations
  Box region;
  int64_t elements;
};

// Views a contiguous slice of a typed buffer as the region's shape.
at::Tensor Slot(const at::Tensor& buffer, int64_t element_offset, absl::Span<const int64_t> sizes,
                int64_t elements) {
  return buffer.narrow(0, element_offset, elements).view(at::IntArrayRef(sizes.data(), sizes.size()));
}

}  // namespace

absl::Status ExchangeBoxes(c10d::ProcessGroup& pg, c10::ScalarType dtype,
                           const std::vector<ExchangeBox>& sources, const std::vector<ExchangeBox>& destinations,
                           ExchangeStats* stats) {
  // Moving values is not differentiable; keep autograd out of the copies.
  at::NoGradGuard no_grad;
  const int me = pg.getRank();
  const int w = pg.getSize();
  const int64_t elem = static_cast<int64_t>(c10::elementSize(dtype));
  // Every rank enumerates the same transfers in the same order (source-major),
  // so sender and receiver agree on the layout of each rank-pair's bytes.
  std::vector<std::vector<Transfer>> to_rank(w), from_rank(w);
  std::vector<int64_t> send_elems(w, 0), recv_elems(w, 0);
  bool any_remote = false;
  ExchangeStats local_stats;
  for (int i = 0; i < static_cast<int>(sources.size()); ++i) {
    const ExchangeBox& s = sources[i];
    for (int j = 0; j < static_cast<int>(destinations.size()); ++j) {
      const ExchangeBox& d = destinations[j];
      std::optional<Box> region = Intersect(s, d);
      if (!region) continue;
      const int64_t n = region->NumElements();
      if (s.rank == d.rank) {
        if (s.rank == me) {
          RegionView(d.tensor, d, *region).copy_(RegionView(s.tensor, s, *region));
          local_stats.bytes_copied_locally += n * elem;
        }
        continue;
      }
      any_remote = true;
      if (s.rank == me) {
        to_rank[d.rank].push_back({i, j, *region, n});
        send_elems[d.rank] += n;
      }
      if (d.rank == me) {
        from_rank[s.rank].push_back({i, j, *region, n});
        recv_elems[s.rank] += n;
      }
    }
  }
  if (any_remote) {
    int64_t send_total = 0, recv_total = 0;
    for (int r = 0; r < w; ++r) {
      send_total += send_elems[r];
      recv_total += recv_elems[r];
    }
    // Step 1: pack what leaves this rank, rank-major.
    at::Tensor send = at::empty({send_total}, at::TensorOptions().dtype(dtype));
    int64_t pos = 0;
    for (int r = 0; r < w; ++r) {
      for (const Transfer& t : to_rank[r]) {
        const ExchangeBox& s = sources[t.src];
        Slot(send, pos, t.region.sizes, t.elements).copy_(RegionView(s.tensor, s, t.region));
        pos += t.elements;
      }
    }
    // Step 2: one all-to-all moves every remote element once.
    at::Tensor recv = at::empty({recv_total}, at::TensorOptions().dtype(dtype));
    std::vector<int64_t> send_bytes(w), recv_bytes(w);
    for (int r = 0; r < w; ++r) {
      send_bytes[r] = send_elems[r] * elem;
      recv_bytes[r] = recv_elems[r] * elem;
    }
    SL_RETURN_IF_ERROR(AllToAllBytes(pg, ByteView(send), send_bytes, ByteView(recv), recv_bytes));
    // Step 3: unpack into the destination boxes.
    pos = 0;
    for (int r = 0; r < w; ++r) {
      for (const Transfer& t : from_rank[r]) {
        const ExchangeBox& d = destinations[t.dst];
        RegionView(d.tensor, d, t.region).copy_(Slot(recv, pos, t.region.sizes, t.elements));
        pos += t.elements;
      }
    }
    local_stats.bytes_sent = send_total * elem;
    local_stats.bytes_received = recv_total * elem;
  }
  if (stats != nullptr) *stats = local_stats;
  return absl::OkStatus();
}

}  // namespace shardlight::sharded
