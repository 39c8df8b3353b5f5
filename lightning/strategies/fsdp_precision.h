// The checks of FSDP's mixed-precision policy (FsdpOptions::param_dtype and
// reduce_dtype; fsdp_strategy.h, "Mixed precision"): what the build can
// compute in and what the group can sum are probed, never read off a version
// string, and a Trainer precision that picks another compute dtype is
// refused. Each check fails every rank alike, before any collective of a
// step could hang.
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_PRECISION_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_PRECISION_H_

#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::lightning {

// A floating dtype by torch's name ("bfloat16", "torch.float32", "float")
// or the short one ("bf16", "fp16", "fp32", "fp64"). InvalidArgument naming
// `what` (a flag, an option) and the name, with the accepted short names.
absl::StatusOr<c10::ScalarType> ParseFloatDtype(absl::string_view name, absl::string_view what);

// Local, at Setup. InvalidArgument naming the option: a param_dtype or
// reduce_dtype that is not floating; a param_dtype this build cannot compute
// in -- a probe runs a small matmul and its backward in it and checks the
// values (the probe's error is quoted).
absl::Status CheckFsdpPolicy(const std::optional<c10::ScalarType>& param_dtype,
                             const std::optional<c10::ScalarType>& reduce_dtype);

// Local, before the Trainer's Fit does anything collective. The Trainer's
// precision and the policy must agree on the compute dtype: "32-true" takes
// any policy; "bf16-mixed" (autocast to bfloat16 around the step) a
// param_dtype of bfloat16 or float32 (autocast then picks each op's dtype, as
// torch.autocast over FSDP2), not another one (autocast would recast it op by
// op); "bf16-true" (the parameters themselves bfloat16, so the master shards
// too) a param_dtype of bfloat16 only. InvalidArgument naming both.
absl::Status CheckPolicyWithPrecision(const std::optional<c10::ScalarType>& param_dtype,
                                      const std::string& precision);

// Collective (the first step's, beside the reduce_scatter probe): whether
// `pg` sums `dtype` tensors with the collective the reduce-scatter will use
// (reduce_scatter, else allreduce). Agreed: InvalidArgument on every rank,
// "fsdp reduce_dtype probe failed on rank R: ..." naming the dtype and
// c10d's words, when any rank cannot.
absl::Status ProbeReduceDtype(c10d::ProcessGroup& pg, c10::ScalarType dtype, bool reduce_scatter);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_PRECISION_H_
