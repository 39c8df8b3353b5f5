#include "lightning/tp/mesh_gradients.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
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

namespace {

// Every gradient scaled so that `norm` becomes at most max_norm (PyTorch's clip_grad_norm_).
void ScaleToNorm(const MeshParams& params, double norm, double max_norm) {
  const double coef = std::min(1.0, max_norm / (norm + 1e-6));
  at::NoGradGuard no_grad;
  for (const auto& [key, p] : params) {
    if (p->local().grad().defined()) p->local().mutable_grad().mul_(coef);
  }
}

absl::Status CheckMaxNorm(double max_norm) {
  if (!(max_norm > 0)) return absl::InvalidArgumentError(absl::StrCat("max_norm must be > 0, not ", max_norm));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<double> ClipGradNorm(const TpMesh& tp, const MeshParams& params, double max_norm) {
  SL_RETURN_IF_ERROR(CheckMaxNorm(max_norm));
  SL_ASSIGN_OR_RETURN(const double norm, GlobalGradNorm(tp, params));
  ScaleToNorm(params, norm, max_norm);
  return norm;
}

absl::StatusOr<double> MeshGradNorm(const MeshParams& params) {
  if (params.empty()) return 0.0;
  at::NoGradGuard no_grad;
  at::Tensor sum = at::zeros({1}, at::kDouble);
  for (const auto& [key, p] : params) {
    bool counts = true;  // this rank is its piece's first holder
    for (size_t d = 0; d < p->placements().size(); ++d) {
      const sharded::mesh::MeshPlacement& placement = p->placements()[d];
      if (placement.is_partial()) {
        return absl::InvalidArgumentError(absl::StrCat("gradient norm of '", key, "': placement ",
                                                       sharded::mesh::PlacementsString(p->placements()),
                                                       " has a Partial dim (redistribute it first)"));
      }
      if (placement.is_replicate() && p->mesh()->coords()[d] != 0) counts = false;
    }
    const at::Tensor& g = p->local().grad();
    if (counts && g.defined()) sum += g.to(at::kDouble).pow(2).sum();
  }
  c10d::ProcessGroup& world = *params.front().second->mesh()->world();
  SL_RETURN_IF_ERROR(sharded::NoThrow([&] {
    AllreduceInPlace(sum, world);
    return absl::OkStatus();
  }));
  return std::sqrt(sum.item<double>());
}

void ClampGradValues(const MeshParams& params, double clip_value) {
  at::NoGradGuard no_grad;
  for (const auto& [key, p] : params) {
    at::Tensor local = p->local();
    if (local.grad().defined()) local.mutable_grad().clamp_(-clip_value, clip_value);
  }
}

absl::StatusOr<double> ClipMeshGradNorm(const MeshParams& params, double max_norm) {
  SL_RETURN_IF_ERROR(CheckMaxNorm(max_norm));
  SL_ASSIGN_OR_RETURN(const double norm, MeshGradNorm(params));
  ScaleToNorm(params, norm, max_norm);
  return norm;
}

}  // namespace shardlight::lightning::tp
