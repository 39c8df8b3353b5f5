// Thin, status-returning wrappers over the c10d collectives the sharded code
// uses. c10d reports failures (timeouts, a peer that closed its connection) by
// throwing from Work::wait(); here they become absl::Status values that name
// the operation, so callers can return them on every rank.
#ifndef SHARDLIGHT_SHARDED_COLLECTIVES_H_
#define SHARDLIGHT_SHARDED_COLLECTIVES_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::sharded {

// Every rank contributes `mine`; every rank receives all ranks' strings in
// rank order. Lengths may differ (two collectives: lengths, then bytes).
absl::StatusOr<std::vector<std::string>> AllgatherStrings(c10d::ProcessGroup& pg,
                                                          const std::string& mine);

// Variable-size all-to-all over raw bytes: rank r receives send_counts[r]
// bytes from this rank's `send` (concatenated in rank order) and this rank
// receives recv_counts[s] bytes from rank s into `recv`. Both tensors are
// 1-d kByte; counts must agree pairwise across ranks (the caller computes both
// from shared metadata).
absl::Status AllToAllBytes(c10d::ProcessGroup& pg, at::Tensor send,
                           const std::vector<int64_t>& send_counts, at::Tensor recv,
                           const std::vector<int64_t>& recv_counts);

// The agreement step of every collective entry point: each rank contributes
// its local verdict -- an error, or a fingerprint of what it is about to do --
// and every rank returns the same status: the lowest failing rank's error
// (its code, message prefixed "rank R: "), else InvalidArgument when the
// fingerprints differ ("ranks disagree on the <what>: rank 0 and rank R ..."),
// else OK. A rank with bad input thus fails its peers too instead of leaving
// them in the next collective; Unavailable if the exchange itself fails.
absl::Status AgreeOn(c10d::ProcessGroup& pg, const absl::StatusOr<uint64_t>& local, const std::string& what);

// FNV-1a: a fingerprint that is the same in every process and build.
uint64_t StableHash(absl::string_view text);

// Waits for `work` (a collective issued on `pg`), turning a thrown c10d error
// into Unavailable naming `op`. When a RankMonitor is attached to `pg` (the
// simulator and real process groups attach one), the wait is recorded as this
// rank's arrival and a failure names the ranks that had not arrived or are
// gone: "allreduce failed: rank 2 had not arrived at collective #7: <c10d's words>".
absl::Status WaitFor(c10d::ProcessGroup& pg, const c10::intrusive_ptr<c10d::Work>& work, const char* op);

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_COLLECTIVES_H_
