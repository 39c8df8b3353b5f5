// Clipping the gradients to a global 2-norm over the whole model, whatever
// each rank holds of it (torch.nn.utils.clip_grad_norm_ with norm_type 2, as
// PyTorch computes it over FSDP2's sharded DTensor gradients): the same norm,
// and the same clipped update, under ddp and fsdp at any world size.
//
// Called after a strategy's ReduceGradients, when every dense gradient is the
// same on every rank (counted once) and every sharded gradient is this rank's
// disjoint part of its tensor (summed over the ranks: a ShardedTensor's shards
// never overlap).
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_GRADIENT_CLIPPING_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_GRADIENT_CLIPPING_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lightning/trainable.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::lightning {

// Collective (one allreduce of one double). Scales every gradient of
// `trainables` by min(1, max_norm / (norm + 1e-6)), torch's coefficient, and
// returns the norm before clipping. InvalidArgument when max_norm is not
// positive; Unavailable naming `op` when the allreduce fails.
absl::StatusOr<double> ClipGradientNorm(const Trainables& trainables, c10d::ProcessGroup& pg, double max_norm,
                                        absl::string_view op);

// Clamps every local gradient of `trainables` to [-clip_value, clip_value]
// (torch.nn.utils.clip_grad_value_, Lightning's gradient_clip_algorithm=
// "value"). Local: each rank clamps what it holds, which after the reduction
// is the same dense gradient on every rank and its own shards.
void ClipGradientValue(const Trainables& trainables, double clip_value);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_GRADIENT_CLIPPING_H_
