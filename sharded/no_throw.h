// The one exception-to-status mechanism: LibTorch, the c10d collectives and
// user callbacks may throw; shardlight returns absl::Status. At the edges of
// a collective protocol's local phases this matters twice over. A rank that throws between two agreements would skip the next one
// and leave its peers waiting until the collective timeout; run each phase
// through NoThrow instead, so the rank reports the exception as its outcome
// and every rank returns the same error, naming it.
#ifndef SHARDLIGHT_SHARDED_NO_THROW_H_
#define SHARDLIGHT_SHARDED_NO_THROW_H_

#include "absl/status/status.h"

namespace shardlight::sharded {

// The exception being handled as a status: c10::Error as Internal with its
// message (no backtrace), std::bad_alloc as ResourceExhausted, any other
// std::exception as Internal with what(). Call only inside a catch block.
absl::Status StatusFromCurrentException();

// f() (an absl::Status or absl::StatusOr), or the status of what it threw.
template <typename F>
auto NoThrow(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (...) {
    return StatusFromCurrentException();
  }
}

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_NO_THROW_H_
