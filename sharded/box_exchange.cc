#include "sharded/box_exchange.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>

#include "sharded/collectives.h"

namespace shardlight::sharded {

bool Intersect(const std::vector<int64_t>& a_off, const std::vector<int64_t>& a_size,
               const std::vector<int64_t>& b_off, const std::vector<int64_t>& b_size,
               std::vector<int64_t>* off, std::vector<int64_t>* size) {
  const size_t n = a_off.size();
  off->resize(n);
  size->resize(n);
  for (size_t d = 0; d < n; ++d) {
    const int64_t lo = std::max(a_off[d], b_off[d]);
    const int64_t hi = std::min(a_off[d] + a_size[d], b_off[d] + b_size[d]);
    if (hi <= lo) return false;
    (*off)[d] = lo;
    (*size)[d] = hi - lo;
  }
  return true;
}

at::Tensor RegionView(const at::Tensor& tensor, const std::vector<int64_t>& tensor_offsets,
                      const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes) {
  at::Tensor view = tensor;
  for (size_t d = 0; d < offsets.size(); ++d) {
    view = view.narrow(static_cast<int64_t>(d), offsets[d] - tensor_offsets[d], sizes[d]);
  }
  return view;
}

namespace {

int64_t Volume(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

// One overlap between a source and a destination box.
struct Transfer {
  int src;  // index into sources
  int dst;  // index into destinations
  std::vector<int64_t> offsets, sizes;
  int64_t elements;
};

// Views a contiguous slice of a typed buffer as the region's shape.
at::Tensor Slot(const at::Tensor& buffer, int64_t element_offset, const std::vector<int64_t>& sizes,
                int64_t elements) {
  return buffer.narrow(0, element_offset, elements).view(sizes);
}

// Bytes of a typed 1-d buffer, without a copy.
at::Tensor AsBytes(const at::Tensor& buffer) {
  return at::from_blob(buffer.data_ptr(), {buffer.numel() * static_cast<int64_t>(buffer.element_size())},
                       at::TensorOptions().dtype(at::kByte));
}

}  // namespace

absl::Status ExchangeBoxes(c10d::ProcessGroup& pg, c10::ScalarType dtype,
                           const std::vector<Box>& sources, const std::vector<Box>& destinations,
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
  std::vector<int64_t> off, size;
  for (int i = 0; i < static_cast<int>(sources.size()); ++i) {
    const Box& s = sources[i];
    for (int j = 0; j < static_cast<int>(destinations.size()); ++j) {
      const Box& d = destinations[j];
      if (!Intersect(s.offsets, s.sizes, d.offsets, d.sizes, &off, &size)) continue;
      const int64_t n = Volume(size);
      if (s.rank == d.rank) {
        if (s.rank == me) {
          RegionView(d.tensor, d.offsets, off, size).copy_(RegionView(s.tensor, s.offsets, off, size));
          local_stats.bytes_copied_locally += n * elem;
        }
        continue;
      }
      any_remote = true;
      if (s.rank == me) {
        to_rank[d.rank].push_back({i, j, off, size, n});
        send_elems[d.rank] += n;
      }
      if (d.rank == me) {
        from_rank[s.rank].push_back({i, j, off, size, n});
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
        const Box& s = sources[t.src];
        Slot(send, pos, t.sizes, t.elements).copy_(RegionView(s.tensor, s.offsets, t.offsets, t.sizes));
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
    absl::Status status = AllToAllBytes(pg, AsBytes(send), send_bytes, AsBytes(recv), recv_bytes);
    if (!status.ok()) return status;
    // Step 3: unpack into the destination boxes.
    pos = 0;
    for (int r = 0; r < w; ++r) {
      for (const Transfer& t : from_rank[r]) {
        const Box& d = destinations[t.dst];
        RegionView(d.tensor, d.offsets, t.offsets, t.sizes).copy_(Slot(recv, pos, t.sizes, t.elements));
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
