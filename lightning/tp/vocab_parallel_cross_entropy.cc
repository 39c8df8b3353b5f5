#include "lightning/tp/vocab_parallel_cross_entropy.h"

#include <torch/csrc/autograd/custom_function.h>

#include "lightning/tp/tp_collectives.h"

namespace shardlight::lightning::tp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct ParallelCrossEntropyFunction : public torch::autograd::Function<ParallelCrossEntropyFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                            int64_t vocab_start, int64_t group_address) {
    c10d::ProcessGroup& group = *reinterpret_cast<c10d::ProcessGroup*>(group_address);
    const int64_t n = logits.size(0), local = logits.size(1);
    // 1: the global maximum per token (empty slices contribute -inf).
    at::Tensor max = local > 0 ? std::get<0>(logits.max(1)).contiguous()
                               : at::full({n}, -std::numeric_limits<float>::infinity(), logits.options());
    AllreduceInPlace(max, group, c10d::ReduceOp::MAX);
    const at::Tensor shifted = logits - max.unsqueeze(1);
    const at::Tensor exp = shifted.exp();
    // 2: sum of exponentials and the target's shifted logit (0 where another rank owns it).
    const at::Tensor mine = (targets >= vocab_start) & (targets < vocab_start + local);
    const at::Tensor column = at::where(mine, targets - vocab_start, at::zeros_like(targets));
    at::Tensor picked = local > 0 ? shifted.gather(1, column.unsqueeze(1)).squeeze(1) * mine.to(logits.scalar_type())
                                  : at::zeros({n}, logits.options());
    at::Tensor sums = at::stack({exp.sum(1), picked}).contiguous();
    AllreduceInPlace(sums, group, c10d::ReduceOp::SUM);
    const at::Tensor total = sums[0];
    ctx->save_for_backward({exp / total.unsqueeze(1), column, mine});
    return total.log() - sums[1];
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    at::Tensor grad = saved[0].clone();
    if (grad.size(1) > 0) {
      grad.scatter_add_(1, saved[1].unsqueeze(1), -saved[2].to(grad.scalar_type()).unsqueeze(1));
    }
    return {grad * grads[0].unsqueeze(1), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor VocabParallelCrossEntropy(const at::Tensor& local_logits, const at::Tensor& targets, int64_t vocab_start,
                                     c10d::ProcessGroup& tp_group) {
  return ParallelCrossEntropyFunction::apply(local_logits, targets, vocab_start,
                                             reinterpret_cast<int64_t>(&tp_group));
}

}  // namespace shardlight::lightning::tp
