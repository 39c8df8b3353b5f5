// The all-gather FSDP issues, by capability: c10d's flat all-gather (one
// input, one output of W slots end to end: _allgather_base, 2.15's
// all_gather_single) where the group's backend runs it, else its list
// all-gather into W views of one buffer. Gloo runs the list form by
// gathering into a flat buffer of its own and copying each slot out: the
// flat form saves that buffer (a unit's size per gather) and the copy.
// Gloo in LibTorch 1.13 throws "no support for _allgather_base" when it is
// issued; a probe at the first step decides, on every rank alike
// (sharded/agreement.h), never a version string.
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_FLAT_ALL_GATHER_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_FLAT_ALL_GATHER_H_

#include <ATen/ATen.h>

#include "absl/status/statusor.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::lightning {

// Collective. Whether the flat all-gather of bytes works on `pg` (CPU
// tensors) and puts every rank's bytes in its slot on every rank. Errors
// only when the agreement itself fails.
absl::StatusOr<bool> ProbeFlatAllGather(c10d::ProcessGroup& pg);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_FLAT_ALL_GATHER_H_
