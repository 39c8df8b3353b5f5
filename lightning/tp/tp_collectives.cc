#include "lightning/tp/tp_collectives.h"

#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "sharded/collectives.h"

namespace shardlight::lightning::tp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The group outlives every graph built on it (the mesh holds it), so the
// context keeps its address.
int64_t Address(c10d::ProcessGroup& g) { return reinterpret_cast<int64_t>(&g); }
c10d::ProcessGroup& GroupAt(AutogradContext* ctx) {
  return *reinterpret_cast<c10d::ProcessGroup*>(ctx->saved_data["group"].toInt());
}

at::Tensor Summed(const at::Tensor& x, c10d::ProcessGroup& g) {
  at::Tensor t = x.contiguous().clone();
  AllreduceInPlace(t, g);
  return t;
}

struct CopyToTpFunction : public torch::autograd::Function<CopyToTpFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {Summed(grads[0], GroupAt(ctx)), at::Tensor()};
  }
};

struct ReduceFromTpFunction : public torch::autograd::Function<ReduceFromTpFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    return Summed(x, *reinterpret_cast<c10d::ProcessGroup*>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) { return {grads[0], at::Tensor()}; }
};

}  // namespace

void AllreduceInPlace(at::Tensor& t, c10d::ProcessGroup& group, c10d::ReduceOp op) {
  if (group.getSize() == 1) return;
  std::vector<at::Tensor> tensors{t};
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  const absl::Status s =
      sharded::RunCollective(group, "tp allreduce", [&] { return group.allreduce(tensors, options); });
  if (!s.ok()) throw std::runtime_error(s.ToString());
}

at::Tensor CopyToTp(const at::Tensor& x, c10d::ProcessGroup& tp_group) {
  if (tp_group.getSize() == 1) return x;
  return CopyToTpFunction::apply(x, Address(tp_group));
}

at::Tensor ReduceFromTp(const at::Tensor& x, c10d::ProcessGroup& tp_group) {
  if (tp_group.getSize() == 1) return x;
  return ReduceFromTpFunction::apply(x, Address(tp_group));
}

}  // namespace shardlight::lightning::tp
