// The reduce-scatter FSDP needs, by capability: c10d's reduce_scatter where
// the group's backend has it, else an allreduce of every rank's slots and a
// narrow to this rank's (the same sums; W times the bytes received, as DDP's
// allreduce). Gloo in LibTorch 1.13 throws "does not support reduce_scatter"
// when it is issued; a probe at the first step decides, on every rank alike
// (sharded/agreement.h), never a version string.
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_REDUCE_SCATTER_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_REDUCE_SCATTER_H_

#include <ATen/ATen.h>

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::lightning {

// Collective. Whether reduce_scatter of small CPU tensors works on `pg` and
// sums correctly on every rank. Errors only when the agreement itself fails.
absl::StatusOr<bool> ProbeReduceScatter(c10d::ProcessGroup& pg);

// Collective. slots[r] (one 1-d tensor per rank, all of one size and dtype)
// summed over ranks; returns this rank's slot of the sum. With
// `reduce_scatter` false (the probe said no), allreduce + narrow. Unavailable
// naming `op` when the collective fails.
absl::StatusOr<at::Tensor> ReduceScatterSlots(c10d::ProcessGroup& pg, std::vector<at::Tensor> slots,
                                              bool reduce_scatter, absl::string_view op);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_REDUCE_SCATTER_H_
