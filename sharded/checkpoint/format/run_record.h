// RunRecord: what produced a checkpoint -- the model's structure, the seed and
// the options that make two runs different -- stored in its index ("run",
// FORMAT.md) so that a resume can tell a checkpoint of another run from its
// own. The world size is deliberately not part of it: resuming on another
// world size is a feature.
//
// Names are 1..64 bytes of [A-Za-z0-9_.-]; values are printable ASCII up to
// 1024 bytes; at most 64 members. ValidateRunRecord says which rule a record
// breaks (InvalidArgument); an index with a bad record does not load.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_RUN_RECORD_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_RUN_RECORD_H_

#include <map>
#include <string>

#include "absl/status/status.h"

namespace shardlight::sharded::checkpoint {

// name -> value, e.g. "seed" -> "1234", "structure" -> 16 hex digits.
using RunRecord = std::map<std::string, std::string>;

inline constexpr size_t kMaxRunRecordMembers = 64;

absl::Status ValidateRunRecord(const RunRecord& record);

// How `saved` (a checkpoint's) and `current` (this run's) differ, one
// "<name> <saved> there, <current> here" per differing name, "; "-separated
// ("(none)" for a name one side lacks); "" when they are equal.
std::string DescribeRunDifference(const RunRecord& saved, const RunRecord& current);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_RUN_RECORD_H_
