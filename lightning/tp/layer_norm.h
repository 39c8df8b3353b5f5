// ReplicatedLayerNorm: LayerNorm over the last dim whose weight (ones) and
// bias (zeros) are mesh members replicated on every rank of the mesh. Input
// and output are replicated over TP, so every TP rank computes the same
// gradient and only data-parallel reduction applies (mesh_gradients.h).
#ifndef SHARDLIGHT_LIGHTNING_TP_LAYER_NORM_H_
#define SHARDLIGHT_LIGHTNING_TP_LAYER_NORM_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "lightning/sharded_module.h"
#include "lightning/tp/tp_mesh.h"

namespace shardlight::lightning::tp {

class ReplicatedLayerNorm : public ShardedModule {
 public:
  // Collective. InvalidArgument for dim < 1.
  static absl::StatusOr<std::shared_ptr<ReplicatedLayerNorm>> Create(const TpMesh& tp, int64_t dim, double eps = 1e-5);
  at::Tensor Forward(const at::Tensor& x);

 private:
  ReplicatedLayerNorm(int64_t dim, double eps) : ShardedModule("ReplicatedLayerNorm"), dim_(dim), eps_(eps) {}
  int64_t dim_;
  double eps_;
};

}  // namespace shardlight::lightning::tp

#endif  // SHARDLIGHT_LIGHTNING_TP_LAYER_NORM_H_
