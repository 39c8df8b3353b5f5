#include "lightning/tp/mesh_adamw.h"

#include <ATen/core/grad_mode.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "sharded/mesh/mesh_checkpoint.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::tp {

absl::StatusOr<std::unique_ptr<MeshAdamW>> MeshAdamW::Create(MeshParams params, AdamWOptions o) {
  if (!(o.lr > 0) || !(o.eps > 0) || o.beta1 < 0 || o.beta1 >= 1 || o.beta2 < 0 || o.beta2 >= 1 ||
      o.weight_decay < 0) {
    return absl::InvalidArgumentError(absl::StrCat("AdamW options out of range: lr ", o.lr, ", betas (", o.beta1, ", ",
                                                   o.beta2, "), eps ", o.eps, ", weight_decay ", o.weight_decay,
                                                   " (want lr > 0, betas in [0, 1), eps > 0, weight_decay >= 0)"));
  }
  std::unique_ptr<MeshAdamW> adam(new MeshAdamW(std::move(params), o));
  at::NoGradGuard no_grad;
  for (const auto& [key, p] : adam->params_) {
    for (auto* moments : {&adam->exp_avg_, &adam->exp_avg_sq_}) {
      sharded::mesh::MeshTensor m = p->EmptyLike();
      m.local().zero_();
      moments->push_back(std::move(m));
    }
  }
  return adam;
}

void MeshAdamW::ZeroGrad() {
  for (const auto& [key, p] : params_) p->local().mutable_grad() = at::Tensor();
}

void MeshAdamW::Step() {
  at::NoGradGuard no_grad;
  step_.add_(1);
  const double t = static_cast<double>(step_[0].item<int64_t>());
  const double bias1 = 1 - std::pow(options_.beta1, t);
  const double bias2_sqrt = std::sqrt(1 - std::pow(options_.beta2, t));
  const double step_size = options_.lr / bias1;
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor p = params_[i].second->local();
    const at::Tensor& g = p.grad();
    if (!g.defined()) continue;
    if (p.dim() >= 2 && options_.weight_decay > 0) p.mul_(1 - options_.lr * options_.weight_decay);
    at::Tensor m = exp_avg_[i].local();
    at::Tensor v = exp_avg_sq_[i].local();
    m.lerp_(g, 1 - options_.beta1);
    v.mul_(options_.beta2).addcmul_(g, g, 1 - options_.beta2);
    const at::Tensor denom = (v.sqrt() / bias2_sqrt).add_(options_.eps);
    p.addcdiv_(m, denom, -step_size);
  }
}

absl::Status MeshAdamW::AddStateTo(sharded::StateDict& dict, const std::string& prefix, bool for_load) {
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string& key = params_[i].first;
    for (const auto& [suffix, moment] : {std::pair{".exp_avg", &exp_avg_[i]}, std::pair{".exp_avg_sq", &exp_avg_sq_[i]}}) {
      SL_ASSIGN_OR_RETURN(sharded::ShardedTensor view,
                          for_load ? sharded::mesh::ViewForLoad(*moment) : sharded::mesh::ViewForSave(*moment));
      SL_RETURN_IF_ERROR(dict.Insert(prefix + key + suffix, std::move(view)));
    }
  }
  return dict.Insert(prefix + "step", step_);
}

absl::Status MeshAdamW::CompleteLoad() {
  for (size_t i = 0; i < params_.size(); ++i) {
    SL_RETURN_IF_ERROR(sharded::mesh::CompleteLoad(exp_avg_[i]));
    SL_RETURN_IF_ERROR(sharded::mesh::CompleteLoad(exp_avg_sq_[i]));
  }
  return absl::OkStatus();
}

}  // namespace shardlight::lightning::tp
