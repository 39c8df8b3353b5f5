// The reduce-scatter FSDP needs, by capability: c10d's reduce_scatter of one
// flat buffer (_reduce_scatter_base, what reduce_scatter_tensor calls) where
// the group's backend has it, else its reduce_scatter of a list of slots, else
// an allreduce of every rank's slots and a narrow to this rank's (the same
// sums; W times the bytes received, as DDP's allreduce). Gloo in LibTorch
// 1.13 throws "does not support reduce_scatter" when it is issued; in 2.x its
// list reduce_scatter takes ~3x the flat one's time (measured at W=4, 200 KB
// slots). A probe at the first step decides, on every rank alike
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

// Collective. Whether _reduce_scatter_base (one flat input) of `dtype`
// works on `pg` and sums correctly on every rank. Errors only when the
// agreement fails.
absl::StatusOr<bool> ProbeFlatReduceScatter(c10d::ProcessGroup& pg, c10::ScalarType dtype = at::kFloat);

// How ReduceScatterFlat sums: what the probes found.
enum class ReduceScatterPath { kAllreduce, kList, kFlat };

// Collective. slots[r] (one 1-d tensor per rank, all of one size and dtype)
// summed over ranks; returns this rank's slot of the sum. With
// `reduce_scatter` false (the probe said no), allreduce + narrow. Unavailable
// naming `op` when the collective fails.
absl::StatusOr<at::Tensor> ReduceScatterSlots(c10d::ProcessGroup& pg, std::vector<at::Tensor> slots,
                                              bool reduce_scatter, absl::string_view op);

// Collective. `flat` (1-d, contiguous: W equal slots, rank r's at r * n)
// summed over ranks by `path`; returns this rank's slot of the sum (`flat`
// may be overwritten). Unavailable naming `op` when the collective fails.
absl::StatusOr<at::Tensor> ReduceScatterFlat(c10d::ProcessGroup& pg, at::Tensor flat, ReduceScatterPath path,
                                             absl::string_view op);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_REDUCE_SCATTER_H_
