// Column- and row-parallel linear layers (y = x W^T + b, W [out, in]) whose
// weights are mesh members split over the TP dim of a TpMesh:
//
//   ColumnParallelLinear  W placed Shard(0) (rows: output features), b
//                         Shard(0). Input: the full x on every TP rank.
//                         Output: this rank's slice of the output features
//                         (torch.chunk of `out`; uneven and empty slices
//                         allowed). Backward sums dx over the TP group.
//   RowParallelLinear     W placed Shard(1) (columns: input features), b
//                         replicated. Input: this rank's slice of the input
//                         features (a column-parallel layer's output).
//                         Output: the full y on every TP rank (the addends
//                         summed over the TP group, then b added once).
//
// A column layer followed by a row layer with the same hidden size needs one
// TP allreduce forward and one backward. Members: "weight", "bias" (with
// bias). Create is collective over the mesh's world.
#ifndef SHARDLIGHT_LIGHTNING_TP_PARALLEL_LINEAR_H_
#define SHARDLIGHT_LIGHTNING_TP_PARALLEL_LINEAR_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "lightning/sharded_module.h"
#include "lightning/tp/tp_mesh.h"

namespace shardlight::lightning::tp {

struct LinearOptions {
  int64_t in = 0;
  int64_t out = 0;
  bool bias = true;
  double init_std = 0.02;  // weight N(0, std^2) by global index; bias zeros
  uint64_t seed = 0;
};

class ColumnParallelLinear : public ShardedModule {
 public:
  // InvalidArgument for sizes < 1.
  static absl::StatusOr<std::shared_ptr<ColumnParallelLinear>> Create(const TpMesh& tp, const LinearOptions& options);
  // x [..., in] -> [..., local out features].
  at::Tensor Forward(const at::Tensor& x);
  sharded::mesh::MeshTensor& weight() { return *mesh_tensor("weight"); }
  int64_t local_out() const { return local_out_; }

 private:
  explicit ColumnParallelLinear(TpMesh tp) : ShardedModule("ColumnParallelLinear"), tp_(std::move(tp)) {}
  TpMesh tp_;
  int64_t local_out_ = 0;
};

class RowParallelLinear : public ShardedModule {
 public:
  static absl::StatusOr<std::shared_ptr<RowParallelLinear>> Create(const TpMesh& tp, const LinearOptions& options);
  // x [..., local in features] -> [..., out] (replicated over TP).
  at::Tensor Forward(const at::Tensor& x);
  sharded::mesh::MeshTensor& weight() { return *mesh_tensor("weight"); }
  int64_t local_in() const { return local_in_; }

 private:
  explicit RowParallelLinear(TpMesh tp) : ShardedModule("RowParallelLinear"), tp_(std::move(tp)) {}
  TpMesh tp_;
  int64_t local_in_ = 0;
};

}  // namespace shardlight::lightning::tp

#endif  // SHARDLIGHT_LIGHTNING_TP_PARALLEL_LINEAR_H_
