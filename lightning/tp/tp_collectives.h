// The differentiable collectives of tensor parallelism, on a TP sub-group
// (Megatron-LM's f and g):
//   CopyToTp      forward: identity (every TP rank holds the same input);
//                 backward: the gradient summed over the TP group, since each
//                 rank's part of the layer contributed a part of it.
//   ReduceFromTp  forward: the addends of the TP ranks summed (a Partial(sum)
//                 activation made Replicate); backward: identity.
// They are autograd functions, so a layer written with them trains with
// plain backward().
//
// Errors: a failed collective (a peer gone, a timeout) throws
// std::runtime_error with RunCollective's message ("tp allreduce failed:
// ..."), as LibTorch ops throw; callers run the step under sharded::NoThrow.
#ifndef SHARDLIGHT_LIGHTNING_TP_TP_COLLECTIVES_H_
#define SHARDLIGHT_LIGHTNING_TP_TP_COLLECTIVES_H_

#include <ATen/ATen.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::lightning::tp {

at::Tensor CopyToTp(const at::Tensor& x, c10d::ProcessGroup& tp_group);
at::Tensor ReduceFromTp(const at::Tensor& x, c10d::ProcessGroup& tp_group);

// Not differentiable: `t` (contiguous) reduced in place over the group with
// `op` (SUM or MAX); throws like the functions above. A group of one is a
// no-op.
void AllreduceInPlace(at::Tensor& t, c10d::ProcessGroup& group, c10d::ReduceOp op = c10d::ReduceOp::SUM);

}  // namespace shardlight::lightning::tp

#endif  // SHARDLIGHT_LIGHTNING_TP_TP_COLLECTIVES_H_
