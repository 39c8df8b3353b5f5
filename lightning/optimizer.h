// Optimizers over Trainables, with state that checkpoints like the model:
// dense state for dense parameters, a ShardedTensor (same layout) for a
// sharded parameter, so optimizer state is saved shard-by-shard and reloads
// on any world size.
//
// Sgd: SGD with momentum and weight decay (PyTorch's update rule: the first
// step seeds the buffer with the gradient). A parameter without a gradient is
// left alone. AddStateTo/state keys: "<prefix><param key>.momentum_buffer",
// plus "<prefix>step".
//
// AdamW (adamw.cc): torch.optim.AdamW's update, operation for operation (its
// single-tensor path, which CPU tensors take): decoupled weight decay
// param *= 1 - lr * weight_decay, exp_avg.lerp_(grad, 1 - beta1),
// exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * grad^2, bias corrections
// 1 - beta^step, denom = sqrt(exp_avg_sq) / sqrt(bc2) + eps, param -=
// (lr / bc1) * exp_avg / denom. State keys "<prefix><param key>.exp_avg",
// ".exp_avg_sq" (each of its parameter's layout), plus "<prefix>step". One
// step counter for every parameter (torch keeps one per parameter): they
// differ only for a parameter that had no gradient at some step, which is
// left alone here as in torch.
//
// Every optimizer has a learning rate (lr(), set_lr()): an LR schedule
// (lr_schedule.h) sets it before each step.
#ifndef SHARDLIGHT_LIGHTNING_OPTIMIZER_H_
#define SHARDLIGHT_LIGHTNING_OPTIMIZER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lightning/torch_names.h"
#include "lightning/trainable.h"
#include "sharded/plain_value.h"
#include "sharded/state_dict.h"

namespace shardlight::lightning {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Updates every trainable from its gradient. No communication.
  virtual void Step() = 0;
  // Drops every trainable's gradient.
  void ZeroGrad();
  // Adds the optimizer state (sharing storage: loading into the returned
  // entries restores the state in place).
  virtual absl::Status AddStateTo(sharded::StateDict& dict, const std::string& prefix) = 0;
  // The learning rate the next Step uses. The defaults keep a rate that an
  // optimizer written before lr access (which has no rate of its own to
  // follow) ignores: override both to follow a schedule.
  virtual double lr() const { return lr_; }
  // Sets it (an LR schedule does, before each step). InvalidArgument when
  // `lr` is negative or not finite; the rate is then unchanged.
  absl::Status set_lr(double lr);
  // The settings its update uses for the parameter `key` (a trainable's key),
  // named as torch.optim names a param_groups entry's fields (lr, betas, eps,
  // weight_decay, ...): what a checkpoint under torch's names records and a
  // resume from one compares (torch_names.h, torch_checkpoint.h). Empty (the
  // default): no torch.optim counterpart.
  virtual ParamGroupFields ParamGroupOf(const std::string& key) const { return {}; }
  // The trainables this optimizer updates.
  const Trainables& trainables() const { return trainables_; }
  // Its hyper-parameters as torch.optim names them in a param group, for
  // checkpoints (the Trainer saves them as "optimizer.hyper_parameters" and
  // reports a resume whose differ): {'lr': ...} here; Sgd adds momentum
  // and weight_decay, AdamW betas, eps and weight_decay.
  virtual sharded::PlainValue HyperParameters() const;

 protected:
  explicit Optimizer(Trainables trainables) : trainables_(std::move(trainables)) {}
  virtual void SetLr(double lr) { lr_ = lr; }
  Trainables trainables_;

 private:
  double lr_ = 0;
};

// One state tensor per trainable, of its layout: dense for a dense
// parameter, a ShardedTensor like its member for a sharded one.
struct PerParameterState {
  std::vector<at::Tensor> dense;
  std::vector<sharded::ShardedTensor> sharded;

  // Zeros (no communication).
  static PerParameterState ZerosLike(const Trainables& trainables);
  // Inserts "<prefix><param key><suffix>" for each.
  absl::Status AddTo(sharded::StateDict& dict, const Trainables& trainables, const std::string& prefix,
                     const std::string& suffix) const;
};

// Calls `update(param, state)` for every local tensor of `trainables` (a
// dense parameter, or a local shard of a sharded member), with the matching
// local tensor of each of `states`, in order.
void ForEachLocalParameter(const Trainables& trainables, const std::vector<const PerParameterState*>& states,
                           const std::function<void(const at::Tensor&, const std::vector<at::Tensor>&)>& update);

struct SgdOptions {
  double lr = 0.05;
  double momentum = 0.9;
  double weight_decay = 0.0;
};

// What Sgd::Create (and tp::MeshSgd::Create) check: InvalidArgument naming
// a learning rate that is not positive, a momentum outside [0, 1) or a
// negative weight decay.
absl::Status CheckSgdOptions(const SgdOptions& options);

// One torch.optim.SGD update of `param` (a local tensor) from its gradient:
// weight decay added to the gradient, then momentum (`buffer`, seeded with
// the gradient when `first`), then the step. No gradient: unchanged.
void SgdUpdate(const at::Tensor& param, const at::Tensor& buffer, bool first, const SgdOptions& options);

class Sgd : public Optimizer {
 public:
  // InvalidArgument for a learning rate that is not positive, a momentum
  // outside [0, 1) or a negative weight decay. Momentum buffers take each
  // trainable's layout (ShardedTensor::ZerosLike: no communication).
  static absl::StatusOr<std::unique_ptr<Sgd>> Create(Trainables trainables, SgdOptions options);
  void Step() override;
  absl::Status AddStateTo(sharded::StateDict& dict, const std::string& prefix) override;
  double lr() const override { return options_.lr; }
  sharded::PlainValue HyperParameters() const override;
  int64_t steps() const { return step_[0].item<int64_t>(); }

 private:
  Sgd(Trainables trainables, SgdOptions options);
  void SetLr(double lr) override { options_.lr = lr; }
  SgdOptions options_;
  PerParameterState buffers_;
  at::Tensor step_;  // int64 [1]; buffers are seeded from the gradient while it is 0
};

// torch.optim.AdamW's defaults.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class AdamW : public Optimizer {
 public:
  // InvalidArgument (naming the option) for lr <= 0, a beta outside [0, 1),
  // eps <= 0 or a negative weight decay. State takes each trainable's layout.
  static absl::StatusOr<std::unique_ptr<AdamW>> Create(Trainables trainables, AdamWOptions options);
  void Step() override;
  absl::Status AddStateTo(sharded::StateDict& dict, const std::string& prefix) override;
  // torch.optim.AdamW's fields: lr, betas, eps, weight_decay, amsgrad False,
  // maximize False, decoupled_weight_decay True, and torch's defaults for how
  // it computes (foreach None, capturable False, differentiable False, fused
  // None). The same for every parameter.
  ParamGroupFields ParamGroupOf(const std::string& key) const override;
  double lr() const override { return options_.lr; }
  sharded::PlainValue HyperParameters() const override;
  int64_t steps() const { return step_[0].item<int64_t>(); }

 private:
  AdamW(Trainables trainables, AdamWOptions options);
  void SetLr(double lr) override { options_.lr = lr; }
  AdamWOptions options_;
  PerParameterState exp_avg_;
  PerParameterState exp_avg_sq_;
  at::Tensor step_;  // int64 [1]: steps taken
};

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_OPTIMIZER_H_
