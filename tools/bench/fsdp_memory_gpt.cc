#include "tools/bench/fsdp_memory_gpt.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lightning/strategies/ddp_strategy.h"
#include "lightning/strategies/fsdp_strategy.h"

namespace shardlight::tools::bench {
namespace {

class GptMemoryData : public lightning::DataSource {
 public:
  GptMemoryData(simulate::GptOptions model, int64_t batch) : model_(std::move(model)), batch_(batch) {}
  lightning::Batch GetBatch(int64_t step) const override { return GptMemoryBatch(model_, batch_, step); }

 private:
  simulate::GptOptions model_;
  int64_t batch_;
};

class StepHook : public lightning::Callback {
 public:
  explicit StepHook(std::function<void(int64_t)> fn) : fn_(std::move(fn)) {}
  absl::Status OnStepEnd(const lightning::TrainState&, int64_t step, double) override {
    fn_(step);
    return absl::OkStatus();
  }

 private:
  std::function<void(int64_t)> fn_;
};

}  // namespace

std::shared_ptr<lightning::Callback> StepEndCallback(std::function<void(int64_t step)> fn) {
  return std::make_shared<StepHook>(std::move(fn));
}

lightning::Batch GptMemoryBatch(const simulate::GptOptions& model, int64_t batch, int64_t step) {
  const at::Tensor b = at::arange(batch, at::kLong).view({batch, 1});
  const at::Tensor t = at::arange(model.context, at::kLong).view({1, model.context});
  const at::Tensor ids = (b * 131 + t * 31 + 17 * step).remainder(model.vocab);
  return {ids, (ids * 7 + 3).remainder(model.vocab)};
}

int64_t GptBlockParameterCount(const simulate::GptOptions& m) {
  return 2 * 2 * m.dim + 4 * (m.dim * m.dim + m.dim) + (m.mlp_hidden * m.dim + m.mlp_hidden) +
         (m.dim * m.mlp_hidden + m.dim);
}

int64_t GptParameterCount(const simulate::GptOptions& m) {
  return m.layers * GptBlockParameterCount(m) + m.vocab * m.dim + m.context * m.dim + 2 * m.dim + m.vocab * m.dim;
}

absl::StatusOr<std::vector<double>> TrainGptMemory(const GptMemoryRun& run,
                                                   c10::intrusive_ptr<c10d::ProcessGroup> pg) {
  simulate::GptModel module(run.model);
  lightning::TrainerOptions options;
  options.max_steps = run.steps;
  options.seed = 3;
  if (run.strategy == "fsdp" || run.strategy == "fsdp_whole") {
    lightning::FsdpOptions fsdp;
    fsdp.units = simulate::GptModel::FsdpUnits(run.model);
    fsdp.per_unit = run.strategy == "fsdp";
    fsdp.prefetch = run.prefetch;
    fsdp.buffer_pool = run.buffer_pool;
    options.strategy = std::make_shared<lightning::FsdpStrategy>(fsdp);
  } else if (run.strategy != "ddp") {
    return absl::InvalidArgumentError(absl::StrCat("--strategy=", run.strategy, ": want fsdp, fsdp_whole or ddp"));
  }
  std::vector<std::shared_ptr<lightning::Callback>> callbacks;
  if (run.on_step) callbacks.push_back(StepEndCallback(run.on_step));
  auto fit = lightning::Trainer(options, callbacks).Fit(module, GptMemoryData(run.model, run.batch), std::move(pg));
  if (!fit.ok()) return fit.status();
  return fit->losses;
}

}  // namespace shardlight::tools::bench
