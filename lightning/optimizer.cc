#include "lightning/optimizer.h"

#include <ATen/core/grad_mode.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {

void Optimizer::ZeroGrad() {
  for (at::Tensor& t : trainables_.LocalTensors()) {
    if (t.grad().defined()) t.mutable_grad() = at::Tensor();
  }
}

absl::Status Optimizer::set_lr(double lr) {
  if (!(lr >= 0) || !std::isfinite(lr)) {
    return absl::InvalidArgumentError(absl::StrCat("learning rate ", lr, ": want a finite value >= 0"));
  }
  SetLr(lr);
  return absl::OkStatus();
}

PerParameterState PerParameterState::ZerosLike(const Trainables& trainables) {
  PerParameterState state;
  for (const auto& d : trainables.dense) state.dense.push_back(at::zeros_like(d.param).detach());
  for (const auto& s : trainables.sharded) state.sharded.push_back(s.member->ZerosLike(false));
  return state;
}

absl::Status PerParameterState::AddTo(sharded::StateDict& dict, const Trainables& trainables,
                                      const std::string& prefix, const std::string& suffix) const {
  for (size_t i = 0; i < trainables.dense.size(); ++i) {
    SL_RETURN_IF_ERROR(dict.Insert(prefix + trainables.dense[i].key + suffix, dense[i]));
  }
  for (size_t i = 0; i < trainables.sharded.size(); ++i) {
    SL_RETURN_IF_ERROR(dict.Insert(prefix + trainables.sharded[i].key + suffix, sharded[i]));
  }
  return absl::OkStatus();
}

void ForEachLocalParameter(const Trainables& trainables, const std::vector<const PerParameterState*>& states,
                           const std::function<void(const at::Tensor&, const std::vector<at::Tensor>&)>& update) {
  std::vector<at::Tensor> local(states.size());
  for (size_t i = 0; i < trainables.dense.size(); ++i) {
    for (size_t k = 0; k < states.size(); ++k) local[k] = states[k]->dense[i];
    update(trainables.dense[i].param, local);
  }
  for (size_t i = 0; i < trainables.sharded.size(); ++i) {
    const auto& params = trainables.sharded[i].member->local_shards();
    for (size_t j = 0; j < params.size(); ++j) {
      for (size_t k = 0; k < states.size(); ++k) local[k] = states[k]->sharded[i].local_shards()[j].tensor;
      update(params[j].tensor, local);
    }
  }
}

Sgd::Sgd(Trainables trainables, SgdOptions options)
    : Optimizer(std::move(trainables)), options_(options), step_(at::zeros({1}, at::kLong)) {}

absl::Status CheckSgdOptions(const SgdOptions& options) {
  if (!(options.lr > 0) || !(options.momentum >= 0 && options.momentum < 1) || !(options.weight_decay >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("SGD options: lr ", options.lr, " must be > 0, momentum ",
                                                   options.momentum, " in [0, 1), weight_decay ",
                                                   options.weight_decay, " >= 0"));
  }
  return absl::OkStatus();
}

void SgdUpdate(const at::Tensor& param, const at::Tensor& buffer, bool first, const SgdOptions& o) {
  at::NoGradGuard no_grad;
  if (!param.grad().defined()) return;
  at::Tensor grad = param.grad();
  if (o.weight_decay != 0) grad = grad.add(param, o.weight_decay);
  if (o.momentum != 0) {
    if (first) {
      buffer.copy_(grad);
    } else {
      buffer.mul_(o.momentum).add_(grad);
    }
    grad = buffer;
  }
  param.sub_(grad, o.lr);
}

absl::StatusOr<std::unique_ptr<Sgd>> Sgd::Create(Trainables trainables, SgdOptions options) {
  SL_RETURN_IF_ERROR(CheckSgdOptions(options));
  std::unique_ptr<Sgd> sgd(new Sgd(std::move(trainables), options));
  sgd->buffers_ = PerParameterState::ZerosLike(sgd->trainables_);
  return sgd;
}

void Sgd::Step() {
  at::NoGradGuard no_grad;
  const bool first = step_[0].item<int64_t>() == 0;
  ForEachLocalParameter(trainables_, {&buffers_}, [&](const at::Tensor& param, const std::vector<at::Tensor>& state) {
    SgdUpdate(param, state[0], first, options_);
  });
  step_.add_(1);
}

absl::Status Sgd::AddStateTo(sharded::StateDict& dict, const std::string& prefix) {
  SL_RETURN_IF_ERROR(buffers_.AddTo(dict, trainables_, prefix, ".momentum_buffer"));
  return dict.Insert(prefix + "step", step_);
}

sharded::PlainValue Optimizer::HyperParameters() const {
  return sharded::PlainValue::Dict({sharded::PlainValue::Str("lr"), sharded::PlainValue::Float(lr())});
}

sharded::PlainValue Sgd::HyperParameters() const {
  using V = sharded::PlainValue;
  return V::Dict({V::Str("lr"), V::Float(options_.lr), V::Str("momentum"), V::Float(options_.momentum),
                  V::Str("weight_decay"), V::Float(options_.weight_decay)});
}

}  // namespace shardlight::lightning
