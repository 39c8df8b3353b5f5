// The checkpoint a ckpt command reads. A checkpoint directory is used as
// given; a checkpoint root (checkpoint_root.h: a `latest` pointer and
// step-<N>/ directories) resolves to its newest step whose index opens and
// whose data files check out, trying the steps in the order a load does --
// the same resolution LoadCheckpointFromRoot uses (ResolveCheckpointRoot),
// with the same fallback lines. Which step was used is said on `err`.
//
// Errors name what is wrong: a root's bad input (a broken `latest`, two
// directories claiming one step, a step directory that is not a checkpoint),
// a root without `latest` (NotFound), or every step failing (each named).
#ifndef SHARDLIGHT_TOOLS_CKPT_CHECKPOINT_INPUT_H_
#define SHARDLIGHT_TOOLS_CKPT_CHECKPOINT_INPUT_H_

#include <ostream>
#include <string>

#include "absl/status/statusor.h"

namespace shardlight::tools::ckpt {

// `dir` itself when it holds an index.json or is no root; otherwise the
// step directory of the root to use.
absl::StatusOr<std::string> ResolveCheckpointInput(const std::string& dir, std::ostream& err);

}  // namespace shardlight::tools::ckpt

#endif  // SHARDLIGHT_TOOLS_CKPT_CHECKPOINT_INPUT_H_
