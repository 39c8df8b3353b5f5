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
  std::unique_ptr<Sgd> sgd(new Sgd(std::move(trainables), options));
  for (const auto& d : sgd->trainables_.dense) sgd->dense_buffers_.push_back(at::zeros_like(d.param).detach());
  for (const auto& s : sgd->trainables_.sharded) {
    std::vector<sharded::Shard> shards;
    for (const auto& shard : s.member->local_shards()) {
      shards.push_back({at::zeros_like(shard.tensor).detach(), shard.metadata});
    }
    sharded::ShardedTensorMetadata metadata = s.member->metadata();
    metadata.properties.requires_grad = false;
    // Same layout as the member, built locally: no communication.
    auto buffer = sharded::ShardedTensor::InitFromLocalShardsAndGlobalMetadata(std::move(shards), std::move(metadata),
                                                                                s.member->process_group());
    if (!buffer.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("momentum buffer for \"", s.key, "\": ", buffer.status().message()));
    }
    sgd->sharded_buffers_.push_back(*std::move(buffer));
  }
  return sgd;
}

namespace {

void Update(at::Tensor& param, at::Tensor& buffer, bool first, const SgdOptions& o) {
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
    auto& params = trainables_.sharded[i].member->local_shards();
    auto& buffers = sharded_buffers_[i].local_shards();
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
