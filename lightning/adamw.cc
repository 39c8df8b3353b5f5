// AdamW (optimizer.h): torch.optim.AdamW's single-tensor update.
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "lightning/optimizer.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {

AdamW::AdamW(Trainables trainables, AdamWOptions options)
    : Optimizer(std::move(trainables)), options_(options), step_(at::zeros({1}, at::kLong)) {}

absl::StatusOr<std::unique_ptr<AdamW>> AdamW::Create(Trainables trainables, AdamWOptions options) {
  const auto bad = [](const std::string& what) { return absl::InvalidArgumentError("AdamW options: " + what); };
  if (!(options.lr > 0) || !std::isfinite(options.lr)) return bad(absl::StrCat("lr ", options.lr, " must be > 0"));
  if (!(options.beta1 >= 0 && options.beta1 < 1)) return bad(absl::StrCat("beta1 ", options.beta1, " must be in [0, 1)"));
  if (!(options.beta2 >= 0 && options.beta2 < 1)) return bad(absl::StrCat("beta2 ", options.beta2, " must be in [0, 1)"));
  if (!(options.eps > 0)) return bad(absl::StrCat("eps ", options.eps, " must be > 0"));
  if (!(options.weight_decay >= 0)) return bad(absl::StrCat("weight_decay ", options.weight_decay, " must be >= 0"));
  std::unique_ptr<AdamW> adamw(new AdamW(std::move(trainables), options));
  adamw->exp_avg_ = PerParameterState::ZerosLike(adamw->trainables_);
  adamw->exp_avg_sq_ = PerParameterState::ZerosLike(adamw->trainables_);
  return adamw;
}

void AdamW::Step() {
  at::NoGradGuard no_grad;
  step_.add_(1);
  const AdamWOptions& o = options_;
  const double step = static_cast<double>(step_[0].item<int64_t>());
  // As torch computes them, in double: 1 - beta ** step, lr / bc1, bc2 ** 0.5.
  const double bias_correction1 = 1 - std::pow(o.beta1, step);
  const double bias_correction2 = 1 - std::pow(o.beta2, step);
  const double step_size = o.lr / bias_correction1;
  const double bias_correction2_sqrt = std::pow(bias_correction2, 0.5);
  ForEachLocalParameter(trainables_, {&exp_avg_, &exp_avg_sq_},
                        [&](const at::Tensor& param, const std::vector<at::Tensor>& state) {
                          if (!param.grad().defined()) return;
                          const at::Tensor& grad = param.grad();
                          if (o.weight_decay != 0) param.mul_(1 - o.lr * o.weight_decay);
                          state[0].lerp_(grad, 1 - o.beta1);
                          state[1].mul_(o.beta2).addcmul_(grad, grad, 1 - o.beta2);
                          const at::Tensor denom = state[1].sqrt().div(bias_correction2_sqrt).add_(o.eps);
                          param.addcdiv_(state[0], denom, -step_size);
                        });
}

ParamGroupFields AdamW::ParamGroupOf(const std::string& /*key*/) const {
  using sharded::PlainValue;
  const AdamWOptions& o = options_;
  // In torch.optim.Adam's order of its defaults.
  return {{"lr", PlainValue::Float(o.lr)},
          {"betas", PlainValue::Tuple({PlainValue::Float(o.beta1), PlainValue::Float(o.beta2)})},
          {"eps", PlainValue::Float(o.eps)},
          {"weight_decay", PlainValue::Float(o.weight_decay)},
          {"amsgrad", PlainValue::Bool(false)},
          {"maximize", PlainValue::Bool(false)},
          {"foreach", PlainValue::None()},
          {"capturable", PlainValue::Bool(false)},
          {"differentiable", PlainValue::Bool(false)},
          {"fused", PlainValue::None()},
          {"decoupled_weight_decay", PlainValue::Bool(true)}};
}

absl::Status AdamW::AddStateTo(sharded::StateDict& dict, const std::string& prefix) {
  SL_RETURN_IF_ERROR(exp_avg_.AddTo(dict, trainables_, prefix, ".exp_avg"));
  SL_RETURN_IF_ERROR(exp_avg_sq_.AddTo(dict, trainables_, prefix, ".exp_avg_sq"));
  return dict.Insert(prefix + "step", step_);
}

sharded::PlainValue AdamW::HyperParameters() const {
  using V = sharded::PlainValue;
  return V::Dict({V::Str("lr"), V::Float(options_.lr), V::Str("betas"),
                  V::Tuple({V::Float(options_.beta1), V::Float(options_.beta2)}), V::Str("eps"), V::Float(options_.eps),
                  V::Str("weight_decay"), V::Float(options_.weight_decay)});
}

}  // namespace shardlight::lightning
