#include "lightning/tp/mesh_gradients.h"

#include <ATen/core/grad_mode.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "lightning/tp/tp_collectives.h"
#include "sharded/no_throw.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::tp {

absl::Status AllreduceDataParallelGrads(const TpMesh& tp, const MeshParams& params) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  for (const auto& [key, p] : params) {
    at::Tensor local = p->local();
    if (!local.grad().defined()) local.mutable_grad() = at::zeros_like(local);
    grads.push_back(local.grad());
  }
  if (grads.empty()) return absl::OkStatus();
  for (int d = 0; d < tp.mesh->ndim(); ++d) {
    if (d == tp.tp_dim || tp.mesh->size(d) == 1) continue;
    // One flat buffer: one collective per DP dim instead of one per parameter.
    at::Tensor flat = at::cat(at::TensorList([&] {
      std::vector<at::Tensor> pieces;
      for (const at::Tensor& g : grads) pieces.push_back(g.reshape({-1}));
      return pieces;
    }()));
    SL_RETURN_IF_ERROR(sharded::NoThrow([&] {
      AllreduceInPlace(flat, *tp.mesh->group(d));
      return absl::OkStatus();
    }));
    int64_t at = 0;
    for (at::Tensor& g : grads) {
      g.copy_(flat.narrow(0, at, g.numel()).view_as(g));
      at += g.numel();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<double> GlobalGradNorm(const TpMesh& tp, const MeshParams& params) {
  at::NoGradGuard no_grad;
  // [sum of squares over TP-sharded pieces, over replicated ones], in double.
  at::Tensor sums = at::zeros({2}, at::kDouble);
  for (const auto& [key, p] : params) {
    const at::Tensor& g = p->local().grad();
    if (!g.defined()) continue;
    sums[IsTpSharded(tp, *p) ? 0 : 1] += g.to(at::kDouble).pow(2).sum();
  }
  at::Tensor sharded_part = sums.narrow(0, 0, 1).contiguous();
  SL_RETURN_IF_ERROR(sharded::NoThrow([&] {
    AllreduceInPlace(sharded_part, tp.tp_group());
    return absl::OkStatus();
  }));
  return std::sqrt(sharded_part.item<double>() + sums[1].item<double>());
}

absl::StatusOr<double> ClipGradNorm(const TpMesh& tp, const MeshParams& params, double max_norm) {
  if (!(max_norm > 0)) return absl::InvalidArgumentError(absl::StrCat("max_norm must be > 0, not ", max_norm));
  SL_ASSIGN_OR_RETURN(const double norm, GlobalGradNorm(tp, params));
  const double coef = std::min(1.0, max_norm / (norm + 1e-6));
  at::NoGradGuard no_grad;
  for (const auto& [key, p] : params) {
    if (p->local().grad().defined()) p->local().mutable_grad().mul_(coef);
  }
  return norm;
}

}  // namespace shardlight::lightning::tp
