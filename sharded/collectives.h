// Thin, status-returning wrappers over the c10d collectives the sharded code
// uses. c10d reports failures (timeouts, a peer that closed its connection) by
// throwing; here they become absl::Status values that name the operation, so
// callers can return them on every rank. Cross-rank agreement on a verdict is
// agreement.h; this file only moves bytes.
#ifndef SHARDLIGHT_SHARDED_COLLECTIVES_H_
#define SHARDLIGHT_SHARDED_COLLECTIVES_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "sharded/no_throw.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::sharded {

// Every rank contributes `mine`; every rank receives all ranks' strings in
// rank order. Lengths may differ. One exchange when every string is at most
// 248 bytes: a gather of each rank's length and string to rank 0, then its
// broadcast (a latency of two steps whatever the world size; the
// RankMonitor counts them as one collective). A second, an allgather of
// what did not fit, when one is longer.
absl::StatusOr<std::vector<std::string>> AllgatherStrings(c10d::ProcessGroup& pg,
                                                          const std::string& mine);

// Every rank contributes `mine`, whose length is lengths[its rank] (every
// rank passes the same `lengths`, as an agreement gave them); rank `root`
// receives all ranks' strings in rank order, the others an empty vector. One
// gather of the bytes padded to the longest: the root holds the world's
// strings, no other rank more than its own. InvalidArgument (before any
// collective) when `lengths` does not have one length per rank or disagrees
// with `mine`.
absl::StatusOr<std::vector<std::string>> GatherStrings(c10d::ProcessGroup& pg, const std::string& mine,
                                                       const std::vector<int64_t>& lengths, int root);

// The bytes of a contiguous tensor as a 1-d kByte tensor on the same device,
// without a copy (what the byte collectives take).
at::Tensor ByteView(const at::Tensor& contiguous);

// Variable-size all-to-all over raw bytes: rank r receives send_counts[r]
// bytes from this rank's `send` (concatenated in rank order) and this rank
// receives recv_counts[s] bytes from rank s into `recv`. Both tensors are
// 1-d kByte; counts must agree pairwise across ranks (the caller computes both
// from shared metadata).
absl::Status AllToAllBytes(c10d::ProcessGroup& pg, at::Tensor send,
                           const std::vector<int64_t>& send_counts, at::Tensor recv,
                           const std::vector<int64_t>& recv_counts);

namespace internal {
// See RunCollective.
void ArriveAtCollective(c10d::ProcessGroup& pg);
absl::Status CollectiveFailed(c10d::ProcessGroup& pg, absl::string_view op, const absl::Status& error);
}  // namespace internal

// Issues a collective on `pg` with `issue()` (which returns its c10d::Work)
// and waits for it. Whatever c10d throws, at issue or at wait, becomes
// Unavailable "<op> failed: ..." (through NoThrow, the one exception-to-status
// mapping). When a RankMonitor is attached to `pg` (the simulator and real
// process groups attach one), the call counts as this rank's arrival and a
// failure names the ranks that had not arrived or are gone:
// "allreduce failed: rank 2 had not arrived at collective #7: <c10d's words>".
template <typename Issue>
absl::Status ContinueCollective(c10d::ProcessGroup& pg, absl::string_view op, Issue&& issue);
template <typename Issue>
absl::Status RunCollective(c10d::ProcessGroup& pg, absl::string_view op, Issue&& issue) {
  internal::ArriveAtCollective(pg);
  return ContinueCollective(pg, op, std::forward<Issue>(issue));
}

// RunCollective for a later step of one exchange whose first step
// RunCollective issued (a broadcast of what a gather collected): the
// RankMonitor counts the exchange once, so a rank that waits here on a peer
// that never reached the first step names that peer, not the ranks that
// stopped at the first step because of it.
template <typename Issue>
absl::Status ContinueCollective(c10d::ProcessGroup& pg, absl::string_view op, Issue&& issue) {
  absl::Status s = NoThrow([&]() -> absl::Status {
    issue()->wait();
    return absl::OkStatus();
  });
  if (s.ok()) return s;
  return internal::CollectiveFailed(pg, op, s);
}

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_COLLECTIVES_H_
