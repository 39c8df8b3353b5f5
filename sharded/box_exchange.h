// BoxExchange: the one data-movement mechanism behind Reshard, Gather,
// FullTensor and scattering a full tensor.
//
// Every rank passes the same global lists of source boxes and destination
// boxes (each with its owner rank); a box owned by this rank also carries the
// local tensor that holds it. Each destination box receives every element of
// the source boxes it overlaps: copied locally when source and destination
// share a rank, otherwise sent once in a single variable-size all-to-all. An
// element is never sent twice to the same rank and never sent to its own rank.
// Callers agree (agreement.h) on the boxes before calling: the exchange
// itself trusts that every rank passes the same lists.
#ifndef SHARDLIGHT_SHARDED_BOX_EXCHANGE_H_
#define SHARDLIGHT_SHARDED_BOX_EXCHANGE_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "sharded/box.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::sharded {

// A box as the exchange sees it: with its owner rank, and on that rank the
// local tensor that holds exactly this box.
struct ExchangeBox : Box {
  int rank = 0;
  at::Tensor tensor;  // defined only when rank is this rank
};

struct ExchangeStats {
  int64_t bytes_sent = 0;      // over the process group
  int64_t bytes_received = 0;
  int64_t bytes_copied_locally = 0;
};

// All boxes share one dtype and rank of dims. Sources must not overlap each
// other. Returns Unavailable if the collective fails.
absl::Status ExchangeBoxes(c10d::ProcessGroup& pg, c10::ScalarType dtype,
                           const std::vector<ExchangeBox>& sources, const std::vector<ExchangeBox>& destinations,
                           ExchangeStats* stats = nullptr);

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_BOX_EXCHANGE_H_
