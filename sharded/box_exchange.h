// BoxExchange: the one data-movement mechanism behind Reshard, Gather,
// FullTensor and scattering a full tensor.
//
// Every rank passes the same global lists of source boxes and destination
// boxes (each with its owner rank); a box owned by this rank also carries the
// local tensor that holds it. Each destination box receives every element of
// the source boxes it overlaps: copied locally when source and destination
// share a rank, otherwise sent once in a single variable-size all-to-all. An
// element is never sent twice to the same rank and never sent to its own rank.
#ifndef SHARDLIGHT_SHARDED_BOX_EXCHANGE_H_
#define SHARDLIGHT_SHARDED_BOX_EXCHANGE_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::sharded {

struct Box {
  int rank = 0;
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
  at::Tensor tensor;  // defined only when rank is this rank: holds exactly this box
};

struct ExchangeStats {
  int64_t bytes_sent = 0;      // over the process group
  int64_t bytes_received = 0;
  int64_t bytes_copied_locally = 0;
};

// All boxes share one dtype and rank of dims. Sources must not overlap each
// other. Returns Unavailable if the collective fails.
absl::Status ExchangeBoxes(c10d::ProcessGroup& pg, c10::ScalarType dtype,
                           const std::vector<Box>& sources, const std::vector<Box>& destinations,
                           ExchangeStats* stats = nullptr);

// The intersection of two boxes; false when it is empty.
bool Intersect(const std::vector<int64_t>& a_off, const std::vector<int64_t>& a_size,
               const std::vector<int64_t>& b_off, const std::vector<int64_t>& b_size,
               std::vector<int64_t>* off, std::vector<int64_t>* size);

// The view of `tensor` (which holds the box at `tensor_offsets`) covering the
// region at `offsets` with `sizes`.
at::Tensor RegionView(const at::Tensor& tensor, const std::vector<int64_t>& tensor_offsets,
                      const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes);

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_BOX_EXCHANGE_H_
