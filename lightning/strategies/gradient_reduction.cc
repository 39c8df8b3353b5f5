#include "lightning/strategies/gradient_reduction.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "sharded/agreement.h"
#include "sharded/collectives.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {

absl::Status AllreduceWithVerdict(c10d::ProcessGroup& pg, at::Tensor& flat, const absl::Status& local,
                                  absl::string_view op) {
  std::vector<at::Tensor> buffer = {at::cat({flat, at::full({1}, local.ok() ? 0.0 : 1.0, flat.options())})};
  if (pg.getSize() > 1) {
    SL_RETURN_IF_ERROR(sharded::RunCollective(pg, op, [&] { return pg.allreduce(buffer); }));
  }
  if (buffer[0][-1].item<double>() > 0) {
    SL_RETURN_IF_ERROR(sharded::Agree(pg, local, op));
    return absl::InternalError(absl::StrCat(op, ": a rank reported a failure but no error"));
  }
  flat = buffer[0].narrow(0, 0, flat.numel());
  return absl::OkStatus();
}

absl::Status AllreduceDenseGrads(const Trainables& trainables, c10d::ProcessGroup& pg, const absl::Status& local,
                                 absl::string_view op) {
  at::ScalarType wide = at::kFloat;  // float64 gradients are summed in float64, the others in float32
  for (const auto& d : trainables.dense) {
    if (!d.param.grad().defined() || !local.ok()) d.param.mutable_grad() = at::zeros_like(d.param);
    wide = c10::promoteTypes(wide, d.param.grad().scalar_type());
  }
  std::vector<at::Tensor> parts = {at::zeros({0}, wide)};
  for (const auto& d : trainables.dense) parts.push_back(d.param.grad().reshape({-1}).to(wide));
  at::Tensor flat = at::cat(parts);
  SL_RETURN_IF_ERROR(AllreduceWithVerdict(pg, flat, local, op));
  int64_t pos = 0;
  for (const auto& d : trainables.dense) {
    const int64_t n = d.param.numel();
    d.param.mutable_grad().copy_(flat.narrow(0, pos, n).view_as(d.param));
    pos += n;
  }
  return absl::OkStatus();
}

}  // namespace shardlight::lightning
