#include "lightning/strategies/gradient_clipping.h"

#include <ATen/core/grad_mode.h>

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sharded/collectives.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {
namespace {

double SquaredNorm(const at::Tensor& t) {
  const at::Tensor& g = t.grad();
  return g.defined() && g.numel() > 0 ? g.to(at::kDouble).pow(2).sum().item<double>() : 0.0;
}

void Scale(const at::Tensor& t, double coefficient) {
  if (t.grad().defined()) t.grad().mul_(coefficient);
}

}  // namespace

absl::StatusOr<double> ClipGradientNorm(const Trainables& trainables, c10d::ProcessGroup& pg, double max_norm,
                                        absl::string_view op) {
  if (!(max_norm > 0)) return absl::InvalidArgumentError(absl::StrCat("gradient clip norm ", max_norm, "; want > 0"));
  at::NoGradGuard no_grad;
  double replicated = 0;  // the same on every rank
  for (const auto& d : trainables.dense) replicated += SquaredNorm(d.param);
  std::vector<at::Tensor> parts = {at::zeros({1}, at::kDouble)};  // this rank's share of the sharded ones
  for (const auto& s : trainables.sharded) {
    for (const auto& shard : s.member->local_shards()) parts[0] += SquaredNorm(shard.tensor);
  }
  if (pg.getSize() > 1) SL_RETURN_IF_ERROR(sharded::RunCollective(pg, op, [&] { return pg.allreduce(parts); }));
  const double norm = std::sqrt(replicated + parts[0].item<double>());
  const double coefficient = max_norm / (norm + 1e-6);
  if (coefficient < 1.0) {
    for (const at::Tensor& t : trainables.LocalTensors()) Scale(t, coefficient);
  }
  return norm;
}

void ClipGradientValue(const Trainables& trainables, double clip_value) {
  at::NoGradGuard no_grad;
  for (at::Tensor& t : trainables.LocalTensors()) {
    if (t.grad().defined()) t.mutable_grad().clamp_(-clip_value, clip_value);
  }
}

}  // namespace shardlight::lightning
