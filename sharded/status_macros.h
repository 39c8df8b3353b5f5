// Return-if-error and assign-or-return for absl::Status code.
//
// Debian's Abseil 20220623 ships neither, so shardlight has its own pair. They
// take any expression yielding absl::Status / absl::StatusOr<T> and return the
// error unchanged from the enclosing function.
#ifndef SHARDLIGHT_SHARDED_STATUS_MACROS_H_
#define SHARDLIGHT_SHARDED_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define SL_STATUS_CONCAT_INNER_(a, b) a##b
#define SL_STATUS_CONCAT_(a, b) SL_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the caller if not OK.
#define SL_RETURN_IF_ERROR(expr)                        \
  do {                                                  \
    const ::absl::Status sl_status_ = (expr);           \
    if (!sl_status_.ok()) return sl_status_;            \
  } while (0)

// `SL_ASSIGN_OR_RETURN(auto x, StatusOrExpr());` declares/assigns `x` from the
// value, or returns the error from the caller.
#define SL_ASSIGN_OR_RETURN(lhs, expr) \
  SL_ASSIGN_OR_RETURN_IMPL_(SL_STATUS_CONCAT_(sl_statusor_, __LINE__), lhs, expr)

#define SL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = std::move(tmp).value()

#endif  // SHARDLIGHT_SHARDED_STATUS_MACROS_H_
