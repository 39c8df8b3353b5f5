#include "lightning/optimizer.h"

#include <ATen/core/grad_mode.h>

#include "absl/strings/str_cat.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {

void Optimizer::ZeroGrad() {
  for (at::Tensor& t : trainables_.LocalTensors()) {
    if (t.grad().defined()) t.mutable_grad() = at::Tensor();
  }
}

Sgd::Sgd(Trainables trainables, SgdOptions options)
    : Optimizer(std::move(trainables)), options_(options), step_(at::zeros({1}, at::kLong)) {}

absl::StatusOr<std::unique_ptr<Sgd>> Sgd::Create(Trainables trainables, SgdOptions options) {
  if (!(options.lr > 0) || !(options.momentum >= 0 && options.momentum < 1) || !(options.weight_decay >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("SGD options: lr ", options.lr, " must be > 0, momentum ",
                                                   options.momentum, " in [0, 1), weight_decay ",
                                                   options.weight_decay, " >= 0"));
  }
  std::unique_ptr<Sgd> sgd(new Sgd(std::move(trainables), options));
  for (const auto& d : sgd->trainables_.dense) sgd->dense_buffers_.push_back(at::zeros_like(d.param).detach());
  for (const auto& s : sgd->trainables_.sharded) sgd->sharded_buffers_.push_back(s.member->ZerosLike(false));
  return sgd;
}

namespace {

void Update(const at::Tensor& param, const at::Tensor& buffer, bool first, const SgdOptions& o) {
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

}  // namespace

void Sgd::Step() {
  at::NoGradGuard no_grad;
  const bool first = step_[0].item<int64_t>() == 0;
  for (size_t i = 0; i < trainables_.dense.size(); ++i) Update(trainables_.dense[i].param, dense_buffers_[i], first, options_);
  for (size_t i = 0; i < trainables_.sharded.size(); ++i) {
    const auto& params = trainables_.sharded[i].member->local_shards();
    const auto& buffers = sharded_buffers_[i].local_shards();
    for (size_t j = 0; j < params.size(); ++j) Update(params[j].tensor, buffers[j].tensor, first, options_);
  }
  step_.add_(1);
}

absl::Status Sgd::AddStateTo(sharded::StateDict& dict, const std::string& prefix) {
  for (size_t i = 0; i < trainables_.dense.size(); ++i) {
    SL_RETURN_IF_ERROR(dict.Insert(prefix + trainables_.dense[i].key + ".momentum_buffer", dense_buffers_[i]));
  }
  for (size_t i = 0; i < trainables_.sharded.size(); ++i) {
    SL_RETURN_IF_ERROR(dict.Insert(prefix + trainables_.sharded[i].key + ".momentum_buffer", sharded_buffers_[i]));
  }
  return dict.Insert(prefix + "step", step_);
}

}  // namespace shardlight::lightning
