// shardlight's side of //tests/interop:trainer_parity_test: the Net of
// trainer_parity_peer.py (same closed-form weights and data, computed by the
// same ATen kernels), fitted by the Trainer on the simulator with
// accumulate_grad_batches 2, gradient_clip_norm 1.0, AdamW and a warm-up +
// cosine LrSchedule, validation every 2 optimizer steps and
// ModelCheckpoint(monitor="val_loss", save_top_k=2) into a checkpoint root
// at CKPT_DIR. Prints {"losses", "lrs", "validations", "best_k" (its
// best_k_models: [step, val_loss]), "on_disk" (the root's committed steps),
// "latest"} as JSON on stdout.
//
//   trainer_parity_run WORLD_SIZE CKPT_DIR [PRECISION]
//   (the batch rows are split over the ranks; PRECISION: TrainerOptions::precision, 32-true by default)
#include <torch/nn/modules/linear.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lightning/model_checkpoint.h"
#include "lightning/trainer.h"
#include "sharded/checkpoint/roots/checkpoint_root.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "sharded/sharding_spec.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight {
namespace {

// The constants trainer_parity_peer.py shares.
constexpr int64_t kSteps = 8, kMicro = 4, kAccumulate = 2, kValBatches = 3, kValRows = 5;
constexpr double kLr = 0.02, kWeightDecay = 0.05, kStart = 0.1, kMin = 0.05;
constexpr int64_t kWarmup = 3;

at::Tensor ClosedForm(int64_t n, double offset) {
  return at::sin(at::arange(n, at::kDouble) * 0.37 + offset) * 0.3;
}

lightning::Batch Rows(int64_t first, int64_t n, double offset) {
  const at::Tensor x = at::cos(at::arange(first * 4, (first + n) * 4, at::kDouble) * 0.11 + offset).reshape({n, 4}).to(at::kFloat);
  return {x, at::sin(x.sum(1) * 1.3) * 3};
}

class Rowwise : public lightning::DataSource {
 public:
  Rowwise(int64_t rows, double offset) : rows_(rows), offset_(offset) {}
  lightning::Batch GetBatch(int64_t i) const override { return Rows(i * rows_, rows_, offset_); }

 private:
  int64_t rows_;
  double offset_;
};

class Net : public lightning::LightningModule {
 public:
  Net() : LightningModule("Net") {
    l1_ = register_module("l1", torch::nn::Linear(4, 8));
    l2_ = register_module("l2", torch::nn::Linear(8, 1));
    at::NoGradGuard no_grad;
    int i = 0;
    for (at::Tensor p : {l1_->weight, l1_->bias, l2_->weight, l2_->bias}) {
      p.copy_(ClosedForm(p.numel(), i++).to(at::kFloat).reshape(p.sizes()));
    }
  }
  // This rank's chunk of the rows, its squared errors over the batch's row
  // count: the ranks' parts sum to the batch's mean (as Lightning's .mean()).
  absl::StatusOr<at::Tensor> Loss(const lightning::Batch& batch, const lightning::StepContext& ctx) {
    const auto [first, rows] = sharded::ChunkRanges(batch[0].size(0), ctx.world_size)[ctx.rank];
    const at::Tensor x = batch[0].narrow(0, first, rows);
    const at::Tensor error = l2_->forward(at::tanh(l1_->forward(x))).reshape({-1}) - batch[1].narrow(0, first, rows);
    return ctx.world_size == 1 ? error.pow(2).mean() : error.pow(2).sum() / batch[0].size(0);
  }
  absl::StatusOr<at::Tensor> TrainingStep(const lightning::Batch& batch, const lightning::StepContext& ctx) override {
    return Loss(batch, ctx);
  }
  absl::StatusOr<lightning::ValidationLog> ValidationStep(const lightning::Batch& batch,
                                                          const lightning::StepContext& ctx) override {
    auto loss = Loss(batch, ctx);
    if (!loss.ok()) return loss.status();
    return lightning::ValidationLog{{"val_loss", *loss}};
  }
  absl::StatusOr<lightning::OptimizerConfig> ConfigureOptimizersAndSchedule() override {
    auto adamw = lightning::AdamW::Create(lightning::TrainablesOf(*this), {kLr, 0.9, 0.999, 1e-8, kWeightDecay});
    if (!adamw.ok()) return adamw.status();
    lightning::LrScheduleOptions o;
    o.kind = lightning::LrScheduleOptions::Kind::kWarmupCosine;
    o.warmup_steps = kWarmup;
    o.warmup_start_factor = kStart;
    o.min_lr_factor = kMin;
    auto schedule = lightning::LrSchedule::Create(o);
    if (!schedule.ok()) return schedule.status();
    return lightning::OptimizerConfig{*std::move(adamw), *std::move(schedule)};
  }

 private:
  torch::nn::Linear l1_{nullptr}, l2_{nullptr};
};

std::string Doubles(const std::vector<double>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ", ", [](std::string* out, double d) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%.17g", d);
    out->append(buf);
  }), "]");
}

int Main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::cerr << "usage: trainer_parity_run WORLD_SIZE CKPT_DIR [PRECISION]\n";
    return 2;
  }
  const int world_size = std::atoi(argv[1]);
  const std::string dir = argv[2];
  simulate::SimulatedCluster cluster(world_size);
  std::vector<std::shared_ptr<lightning::ModelCheckpoint>> keep(world_size);
  auto fit = cluster.Run([&](simulate::RankContext& ctx) -> absl::StatusOr<lightning::FitResult> {
    Net net;
    lightning::TrainerOptions options;
    options.max_steps = kSteps;
    options.accumulate_grad_batches = kAccumulate;
    options.gradient_clip_norm = 1.0;
    options.val_check_interval = 2;
    options.limit_val_batches = kValBatches;
    options.checkpoint_dir = dir;
    // What retention removes goes to stderr: stdout is the JSON.
    options.save_options.on_removed = [](const std::string& line) { std::cerr << line << "\n"; };
    if (argc == 4) options.precision = argv[3];
    auto mc = lightning::ModelCheckpoint::Create({"val_loss", "min", 2});
    if (!mc.ok()) return mc.status();
    keep[ctx.rank] = *mc;
    return lightning::Trainer(options, {*mc}).Fit(net, Rowwise(kMicro, 0.0), Rowwise(kValRows, 0.5), ctx.pg);
  });
  if (!fit.ok()) {
    std::cerr << fit.status() << "\n";
    return 1;
  }
  const lightning::FitResult& r = (*fit)[0];
  std::vector<std::string> validations;
  for (const auto& [step, metrics] : r.validations) {
    validations.push_back(absl::StrCat("[", step, ", ", Doubles({metrics.at("val_loss")}).substr(1)));
  }
  std::vector<std::string> best_k;
  for (const auto& [step, score] : keep[0]->best_k_models()) {
    best_k.push_back(absl::StrCat("[", step, ", ", Doubles({score}).substr(1)));
  }
  auto root = sharded::checkpoint::ScanCheckpointRoot(dir, sharded::checkpoint::StorageOrDefault(nullptr));
  if (!root.ok()) {
    std::cerr << root.status() << "\n";
    return 1;
  }
  std::vector<int64_t> on_disk;
  for (const auto& s : root->steps) {
    if (s.committed) on_disk.push_back(s.step);
  }
  std::cout << "{\"losses\": " << Doubles(r.losses) << ", \"lrs\": " << Doubles(r.lrs) << ", \"validations\": ["
            << absl::StrJoin(validations, ", ") << "], \"best_k\": [" << absl::StrJoin(best_k, ", ")
            << "], \"on_disk\": [" << absl::StrJoin(on_disk, ", ") << "], \"latest\": " << root->latest.value_or(-1)
            << "}\n";
  return 0;
}

}  // namespace
}  // namespace shardlight

int main(int argc, char** argv) { return shardlight::Main(argc, argv); }
