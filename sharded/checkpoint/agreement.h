// Collective agreement on success: every rank contributes its own outcome and
// every rank returns the same result, so a failure on one rank (a missing
// file, a full disk) becomes the same error, naming that rank, everywhere --
// never a rank that proceeds while another gave up.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_AGREEMENT_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_AGREEMENT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::sharded::checkpoint {

// Collective. When every rank passes OK, returns every rank's `payload` in
// rank order. Otherwise every rank returns the lowest failing rank's error:
// same code, message "<what> failed on rank R: <its message>" (plus how many
// other ranks failed). Unavailable, naming `what`, if the group itself fails.
absl::StatusOr<std::vector<std::string>> AgreeAndGather(c10d::ProcessGroup& pg, const absl::Status& mine,
                                                        const std::string& payload, const std::string& what);

// AgreeAndGather without payloads.
absl::Status Agree(c10d::ProcessGroup& pg, const absl::Status& mine, const std::string& what);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_AGREEMENT_H_
