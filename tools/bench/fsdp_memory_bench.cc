// Peak memory of per-unit FSDP (FsdpOptions::per_unit): a stack of square
// Linear units (a GPT-like depth of equal blocks) trained with AdamW, each
// rank one process of a torchrun job (--mode=process) or thread-ranks of the
// simulator (--mode=threads, for comparing losses). Each process prints its
// peak RSS, the model's full training state (fp32 parameters + gradients +
// AdamW moments) and the ideal per rank (state / W + one unit unsharded);
// tools/bench/fsdp_memory_bench.sh runs it beside PyTorch FSDP2
// (fsdp_memory_peer.py) on the same model in the same run.
//
//   --model=stack --width=D --units=K: K units Linear(D, D) + tanh, then a
//     Linear(D, 1) root.
//   --model=gpt --gpt_dim=D --gpt_layers=L ...: simulate::GptModel (one fsdp
//     unit per block), deferred initialisation by default (fsdp_memory_gpt.h).
// Each process also prints its resident memory after the last optimizer
// step above its resident memory at start (both after malloc_trim: what the
// process keeps), beside the ideal persistent part (state / W).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <signal.h>
#include <sys/resource.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

#include <malloc.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "flags/strict_flags.h"
#include "lightning/lightning_module.h"
#include "lightning/strategies/ddp_strategy.h"
#include "lightning/strategies/fsdp_strategy.h"
#include "lightning/strategies/fsdp_unit.h"
#include "lightning/trainer.h"
#include "sharded/global_random.h"
#include "sharded/sharding_spec.h"
#include "simulate/core/simulated_cluster.h"
#include "tools/bench/fsdp_memory_gpt.h"
#include "tools/bench/launcher_job.h"

ABSL_FLAG(std::string, mode, "process", "process (one rank of a torchrun job) or threads (the simulator)");
ABSL_FLAG(int, world_size, 2, "threads mode: ranks");
ABSL_FLAG(std::string, strategy, "fsdp", "fsdp (per-unit), fsdp_whole (every unit gathered for the step) or ddp");
ABSL_FLAG(int64_t, width, 4096, "each unit's Linear(width, width)");
ABSL_FLAG(int, units, 8, "units in the stack");
ABSL_FLAG(int64_t, batch, 8, "rows per step over all ranks");
ABSL_FLAG(int, steps, 3, "training steps");
ABSL_FLAG(bool, prefetch, true, "fsdp: prefetch the next unit's all-gather");
ABSL_FLAG(bool, buffer_pool, true,
          "fsdp: transient buffers from a pool of mapped blocks (FsdpOptions::buffer_pool); false: malloc");
ABSL_FLAG(std::string, model, "stack", "stack (Linear units) or gpt (simulate::GptModel)");
ABSL_FLAG(int64_t, gpt_dim, 1024, "--model=gpt: width (MLP hidden: 4x)");
ABSL_FLAG(int64_t, gpt_layers, 12, "--model=gpt: blocks (one fsdp unit each)");
ABSL_FLAG(int64_t, gpt_heads, 16, "--model=gpt: attention heads");
ABSL_FLAG(int64_t, gpt_context, 64, "--model=gpt: tokens per sample");
ABSL_FLAG(int64_t, gpt_vocab, 256, "--model=gpt: vocabulary");
ABSL_FLAG(bool, deferred_init, true, "--model=gpt: GptOptions::deferred_init (false: every rank builds the whole model)");

namespace shardlight {
namespace {

using lightning::Batch;
using lightning::ShardedContext;
using lightning::StepContext;

class UnitStack : public lightning::LightningModule {
 public:
  UnitStack(int64_t width, int units) : LightningModule("UnitStack") {
    blocks_ = register_module("blocks", torch::nn::ModuleList());
    for (int u = 0; u < units; ++u) blocks_->push_back(torch::nn::Linear(width, width));
    head_ = register_module("head", torch::nn::Linear(width, 1));
  }

  absl::Status ConfigureShardedModel(const ShardedContext& ctx) override {
    at::NoGradGuard no_grad;
    uint64_t stream = ctx.seed * 1000 + 1;
    for (auto& p : parameters()) {
      const std::vector<int64_t> origin(p.dim(), 0);
      sharded::FillGlobalRandom(p, origin, p.sizes().vec(), stream++, sharded::RandomKind::kUniform);
      const double bound = 1.0 / std::sqrt(static_cast<double>(p.size(-1)));
      p.mul_(2 * bound).sub_(bound);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<at::Tensor> TrainingStep(const Batch& batch, const StepContext& ctx) override {
    const auto [first, rows] = sharded::ChunkRanges(batch[0].size(0), ctx.world_size)[ctx.rank];
    at::Tensor h = batch[0].narrow(0, first, rows);
    for (size_t u = 0; u < blocks_->size(); ++u) {
      auto block = blocks_[u]->as<torch::nn::Linear>();
      h = lightning::RunFsdpUnit(*blocks_[u], [&] { return at::tanh(block->forward(h)); });
    }
    at::Tensor predicted = head_->forward(h).reshape({-1});
    return (predicted - batch[1].narrow(0, first, rows)).pow(2).sum() / batch[0].size(0);
  }

  absl::StatusOr<std::unique_ptr<lightning::Optimizer>> ConfigureOptimizers() override {
    auto adamw = lightning::AdamW::Create(lightning::TrainablesOf(*this), {});
    if (!adamw.ok()) return adamw.status();
    return std::unique_ptr<lightning::Optimizer>(*std::move(adamw));
  }

  std::vector<std::string> UnitNames() const {
    std::vector<std::string> names;
    for (size_t u = 0; u < blocks_->size(); ++u) names.push_back(absl::StrCat("blocks.", u));
    return names;
  }

 private:
  torch::nn::ModuleList blocks_{nullptr};
  torch::nn::Linear head_{nullptr};
};

class StackData : public lightning::DataSource {
 public:
  StackData(int64_t batch, int64_t width) : batch_(batch), width_(width) {}
  Batch GetBatch(int64_t step) const override {
    at::Tensor x = at::empty({batch_, width_}, at::kFloat);
    sharded::FillGlobalRandom(x, {0, 0}, {batch_, width_}, 7919 + static_cast<uint64_t>(step),
                              sharded::RandomKind::kNormal);
    return {x, at::sin(x.sum(1) / std::sqrt(static_cast<double>(width_)))};
  }

 private:
  int64_t batch_, width_;
};

double CurrentRssMib() {
  malloc_trim(0);  // what the process keeps, not what the allocator has not returned yet
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

simulate::GptOptions GptFromFlags() {
  simulate::GptOptions o;
  o.dim = absl::GetFlag(FLAGS_gpt_dim);
  o.mlp_hidden = 4 * o.dim;
  o.layers = absl::GetFlag(FLAGS_gpt_layers);
  o.heads = absl::GetFlag(FLAGS_gpt_heads);
  o.context = absl::GetFlag(FLAGS_gpt_context);
  o.vocab = absl::GetFlag(FLAGS_gpt_vocab);
  o.deferred_init = absl::GetFlag(FLAGS_deferred_init);
  return o;
}

// Parameters of the whole model and of its largest unit, per --model.
std::pair<double, double> ModelNumel() {
  if (absl::GetFlag(FLAGS_model) == "gpt") {
    const simulate::GptOptions o = GptFromFlags();
    return {static_cast<double>(tools::bench::GptParameterCount(o)),
            static_cast<double>(tools::bench::GptBlockParameterCount(o))};
  }
  const double d = static_cast<double>(absl::GetFlag(FLAGS_width));
  return {(d * d + d) * absl::GetFlag(FLAGS_units) + d + 1, d * d + d};
}

double PeakRssMib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
}

absl::StatusOr<std::vector<double>> Train(c10::intrusive_ptr<c10d::ProcessGroup> pg,
                                          std::function<void(int64_t)> on_step = {}) {
  const std::string model = absl::GetFlag(FLAGS_model);
  if (model == "gpt") {
    tools::bench::GptMemoryRun run;
    run.model = GptFromFlags();
    run.batch = absl::GetFlag(FLAGS_batch);
    run.steps = absl::GetFlag(FLAGS_steps);
    run.strategy = absl::GetFlag(FLAGS_strategy);
    run.prefetch = absl::GetFlag(FLAGS_prefetch);
    run.buffer_pool = absl::GetFlag(FLAGS_buffer_pool);
    run.on_step = std::move(on_step);
    return tools::bench::TrainGptMemory(run, std::move(pg));
  }
  if (model != "stack") return absl::InvalidArgumentError(absl::StrCat("--model=", model, ": want stack or gpt"));
  UnitStack module(absl::GetFlag(FLAGS_width), absl::GetFlag(FLAGS_units));
  lightning::TrainerOptions options;
  options.max_steps = absl::GetFlag(FLAGS_steps);
  options.seed = 3;
  const std::string strategy = absl::GetFlag(FLAGS_strategy);
  if (strategy == "fsdp" || strategy == "fsdp_whole") {
    lightning::FsdpOptions fsdp;
    fsdp.units = module.UnitNames();
    fsdp.per_unit = strategy == "fsdp";
    fsdp.prefetch = absl::GetFlag(FLAGS_prefetch);
    fsdp.buffer_pool = absl::GetFlag(FLAGS_buffer_pool);
    options.strategy = std::make_shared<lightning::FsdpStrategy>(fsdp);
  } else if (strategy != "ddp") {
    return absl::InvalidArgumentError(absl::StrCat("--strategy=", strategy, ": want fsdp, fsdp_whole or ddp"));
  }
  StackData data(absl::GetFlag(FLAGS_batch), absl::GetFlag(FLAGS_width));
  std::vector<std::shared_ptr<lightning::Callback>> callbacks;
  if (on_step) callbacks.push_back(tools::bench::StepEndCallback(std::move(on_step)));
  auto fit = lightning::Trainer(options, callbacks).Fit(module, data, std::move(pg));
  if (!fit.ok()) return fit.status();
  return fit->losses;
}

std::string Losses(const std::vector<double>& losses) {
  std::vector<std::string> shown;
  for (double l : losses) shown.push_back(absl::StrFormat("%.17g", l));
  return absl::StrJoin(shown, " ");
}

int Main() {
  const std::string mode = absl::GetFlag(FLAGS_mode);
  const std::string strategy = absl::GetFlag(FLAGS_strategy);
  if (mode == "threads") {
    const int w = absl::GetFlag(FLAGS_world_size);
    simulate::SimulatedCluster cluster(w);
    auto losses = cluster.Run([&](simulate::RankContext& ctx) { return Train(ctx.pg); });
    if (!losses.ok()) {
      std::fprintf(stderr, "fsdp_memory_bench: %s\n", losses.status().ToString().c_str());
      return 1;
    }
    std::printf("fsdp_memory: %s W=%d losses %s\n", strategy.c_str(), w, Losses((*losses)[0]).c_str());
    return 0;
  }
  if (mode != "process") {
    std::fprintf(stderr, "fsdp_memory_bench: --mode must be process or threads\n");
    return 2;
  }
  int exit_code = 0;
  const double before = PeakRssMib();
  const double resident_before = CurrentRssMib();
  auto job = tools::bench::JoinLauncherJob("fsdp_memory_bench", std::chrono::minutes(5), &exit_code);
  if (job == nullptr) return exit_code;
  const int rank = job->placement().rank, w = job->placement().world_size;
  double persistent = 0;
  auto losses = Train(job->pg(), [&](int64_t) { persistent = CurrentRssMib(); });
  if (!losses.ok()) {
    std::fprintf(stderr, "fsdp_memory_bench: rank %d: %s\n", rank, losses.status().ToString().c_str());
    return 1;
  }
  const double peak = PeakRssMib();
  (void)job->Leave();
  const auto [params, unit_params] = ModelNumel();
  const double mib = 1024.0 * 1024.0;
  const double state = params * 4 * 4 / mib;  // fp32 parameters, gradients, exp_avg, exp_avg_sq
  const double ideal = state / w + unit_params * 4 * 2 / mib;  // + one unit's full parameters and gradients
  std::printf("fsdp_memory: shardlight %s rank %d/%d peak_rss_mib %.1f (at start %.1f) state_mib %.1f ideal_mib %.1f "
              "persistent_mib %.1f ideal_persistent_mib %.1f\n",
              strategy.c_str(), rank, w, peak, before, state, ideal, persistent - resident_before, state / w);
  if (rank == 0) std::printf("fsdp_memory: shardlight %s W=%d losses %s\n", strategy.c_str(), w, Losses(*losses).c_str());
  return 0;
}

}  // namespace
}  // namespace shardlight

int main(int argc, char** argv) {
  shardlight::tools::flags::ParseFlagsOrExit(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  return shardlight::Main();
}
