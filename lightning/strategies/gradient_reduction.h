// The step's reductions that also carry its verdict: a rank whose phase
// failed still joins the collective with one more element set, so every rank
// learns that some rank failed without an exchange of its own, and then
// which one and why through an agreement (sharded/agreement.h). Used by the
// strategies (gradients) and the Trainer (the loss).
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_GRADIENT_REDUCTION_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_GRADIENT_REDUCTION_H_

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "lightning/trainable.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::lightning {

// Sums `flat` (a 1-d floating tensor) over the group, with one more element
// counting failed ranks. Errors: the failing rank's `local` error on every
// rank ("<op> failed on rank R: ..."); Unavailable naming `op` when the
// collective fails.
absl::Status AllreduceWithVerdict(c10d::ProcessGroup& pg, at::Tensor& flat, const absl::Status& local,
                                  absl::string_view op);

// Sums every dense gradient of `trainables` across ranks in one flat float
// allreduce carrying this rank's verdict (a rank that failed, or has no
// gradient for a parameter, contributes zeros). Errors as above.
absl::Status AllreduceDenseGrads(const Trainables& trainables, c10d::ProcessGroup& pg, const absl::Status& local,
                                 absl::string_view op);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_GRADIENT_REDUCTION_H_
