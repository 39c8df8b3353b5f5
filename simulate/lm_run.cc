#include "simulate/lm_run.h"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iterator>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "lightning/loggers/csv_logger.h"
#include "lightning/loggers/logger_callback.h"
#include "lightning/loggers/progress_bar.h"
#include "lightning/loggers/tensorboard_logger.h"
#include "lightning/metrics/perplexity.h"
#include "lightning/strategies/ddp_strategy.h"
#include "lightning/strategies/fsdp_precision.h"
#include "lightning/strategies/fsdp_strategy.h"
#include "lightning/strategies/fsdp_tp_strategy.h"
#include "lightning/strategies/hsdp_checkpoint.h"
#include "lightning/strategies/model_parallel_strategy.h"
#include "lightning/tp/mesh_optimizer.h"
#include "lightning/torch_checkpoint.h"
#include "lightning/trainer.h"
#include "sharded/agreement.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/interop/dcp/dcp_checkpoint.h"
#include "sharded/checkpoint/storage/storage.h"
#include "sharded/mesh/mesh_checkpoint.h"
#include "sharded/no_throw.h"
#include "sharded/sharding_spec.h"
#include "sharded/status_macros.h"

namespace shardlight::simulate {
namespace {

namespace tp = lightning::tp;
using sharded::mesh::MeshPtr;

// The global batch of each step: samples [step * batch, (step + 1) * batch)
// of the data seed's stream; the module takes its DP share.
class LmData : public lightning::DataSource {
 public:
  LmData(const ByteCorpus& corpus, uint64_t seed, int64_t batch) : corpus_(corpus), seed_(seed), batch_(batch) {}
  lightning::Batch GetBatch(int64_t step) const override {
    auto [ids, targets] = corpus_.Samples(seed_, step * batch_, batch_);
    return {ids, targets};
  }

 private:
  const ByteCorpus& corpus_;
  uint64_t seed_;
  int64_t batch_;
};

// Collective: this step's gradients (mesh tensors of their parameters'
// layouts) as the checkpoint `dir`.
absl::Status SaveGrads(const tp::MeshParams& params, const std::string& dir, c10d::ProcessGroup& world) {
  at::NoGradGuard no_grad;
  std::vector<sharded::mesh::MeshTensor> grads;
  grads.reserve(params.size());
  sharded::StateDict dict;
  for (const auto& [key, p] : params) {
    grads.push_back(p->EmptyLike());
    grads.back().local().copy_(p->local().grad());
    SL_ASSIGN_OR_RETURN(sharded::ShardedTensor view, sharded::mesh::ViewForSave(grads.back()));
    SL_RETURN_IF_ERROR(dict.Insert("grad." + key, std::move(view)));
  }
  return sharded::checkpoint::SaveCheckpoint(dict, dir, world);
}

int64_t PeakRssBytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

// The job's part of the Trainer's loop: the resume line, the loss lines,
// the save at save_at (the Trainer saves only at the end, when save_at is -1),
// the training time.
class LmCallback : public lightning::Callback {
 public:
  // `hsdp_mesh`: hsdp's (the save at save_at writes its checkpoint views), else null.
  LmCallback(const LmJobOptions& o, GptModel& model, c10d::ProcessGroup& world, LmRankResult& result,
             MeshPtr hsdp_mesh)
      : o_(o), model_(model), world_(world), result_(result), hsdp_mesh_(std::move(hsdp_mesh)) {}

  absl::Status OnLoadCheckpoint(const lightning::TrainState& state, int64_t step, const std::string& dir) override {
    resumed_ = true;
    result_.resumed_from_dcp = !sharded::checkpoint::HasCommittedCheckpoint(dir) &&
                               sharded::checkpoint::dcp::IsDcpCheckpoint(dir, sharded::checkpoint::PosixStorage());
    if (o_.log != nullptr && state.rank == 0) {
      *o_.log << absl::StrFormat("lm: resumed at step %d from the %s checkpoint in %s\n", step,
                                 result_.resumed_from_dcp ? "PyTorch DCP" : "shardlight", dir)
              << std::flush;
    }
    return absl::OkStatus();
  }

  absl::Status OnTrainStart(const lightning::TrainState& state) override {
    if (!o_.checkpoint_dir.empty() && o_.save_at == state.start_step && !resumed_) {
      SL_RETURN_IF_ERROR(Save(state.start_step));
    }
    start_ = end_ = std::chrono::steady_clock::now();
    return absl::OkStatus();
  }

  absl::Status OnStepEnd(const lightning::TrainState& state, int64_t done, double loss) override {
    end_ = std::chrono::steady_clock::now();
    if (o_.log != nullptr && !o_.progress_bar && state.rank == 0 && o_.log_every > 0 &&
        (done % o_.log_every == 0 || done == o_.steps)) {
      *o_.log << absl::StrFormat("lm: step %d loss %.12f perplexity %.3f\n", done, loss, std::exp(loss))
              << std::flush;  // whole lines: other ranks share the stream under a launcher
    }
    if (!o_.checkpoint_dir.empty() && done == o_.save_at) SL_RETURN_IF_ERROR(Save(done));
    return absl::OkStatus();
  }

  double seconds() const { return std::chrono::duration<double>(end_ - start_).count(); }

 private:
  // The Trainer's checkpoint of (model, optimizer, step), or under torch's names
  // (save_format torch_dcp) (collective).
  absl::Status Save(int64_t done) {
    if (o_.save_format == "torch_dcp") {
      return lightning::SaveTorchNamedDcp(model_, *model_.optimizer(), done, o_.checkpoint_dir, world_);
    }
    const at::Tensor step = at::full({1}, done, at::kLong);
    SL_ASSIGN_OR_RETURN(sharded::StateDict dict, lightning::TrainingStateDict(model_, *model_.optimizer(), step));
    if (hsdp_mesh_ != nullptr) SL_RETURN_IF_ERROR(lightning::UseHsdpCheckpointViews(dict, *hsdp_mesh_));
    return sharded::checkpoint::SaveCheckpoint(dict, o_.checkpoint_dir, world_);
  }

  const LmJobOptions& o_;
  GptModel& model_;
  c10d::ProcessGroup& world_;
  LmRankResult& result_;
  MeshPtr hsdp_mesh_;
  bool resumed_ = false;
  std::chrono::steady_clock::time_point start_, end_;
};

// Collective: runs `fn` with every parameter the root holds sharded (fsdp,
// between steps) set to its full tensor, then sets each back to its shard.
absl::Status WithFullParameters(lightning::LightningModule& model, const std::function<absl::Status()>& fn) {
  std::vector<std::pair<at::Tensor, at::Tensor>> restore;  // (parameter, its data between steps)
  for (auto& [key, shard] : model.sharded_parameters()) {
    SL_ASSIGN_OR_RETURN(at::Tensor full, shard.FullTensor());
    at::Tensor* param = model.named_parameters().find(key);
    if (param == nullptr) return absl::InternalError(absl::StrCat("no parameter ", key, " for its shard"));
    restore.emplace_back(*param, param->data());
    param->set_data(full);
  }
  const absl::Status status = fn();
  for (auto& [param, data] : restore) param.set_data(data);
  return status;
}

std::shared_ptr<const lightning::Strategy> StrategyOf(const LmJobOptions& o, const MeshPtr& mesh,
                                                      lightning::ModelParallelStrategy::ReducedHook hook) {
  if (o.strategy == "fsdp" || o.strategy == "hsdp") {
    lightning::FsdpOptions fsdp;
    fsdp.units = GptModel::FsdpUnits(o.model);
    fsdp.per_unit = o.fsdp_per_unit;  // reshard_after_forward: its default, on
    fsdp.prefetch = o.fsdp_prefetch;
    fsdp.buffer_pool = o.fsdp_buffer_pool;
    fsdp.on_unit_forward = o.fsdp_on_unit_forward;
    fsdp.on_unit_collective = o.fsdp_on_unit_collective;
    // Checked in the setup (CheckLmMixedPrecision): the names parse.
    if (!o.param_dtype.empty()) fsdp.param_dtype = *lightning::ParseFloatDtype(o.param_dtype, "param_dtype");
    if (!o.reduce_dtype.empty()) fsdp.reduce_dtype = *lightning::ParseFloatDtype(o.reduce_dtype, "reduce_dtype");
    if (o.strategy == "hsdp") return std::make_shared<lightning::FsdpStrategy>(lightning::FsdpStrategy::Hybrid(mesh, fsdp));
    return std::make_shared<lightning::FsdpStrategy>(fsdp);
  }
  if (o.strategy == "ddp") return std::make_shared<lightning::DdpStrategy>();
  if (o.strategy == "fsdp_tp") {
    lightning::FsdpOptions fsdp;
    fsdp.on_unit_collective = o.fsdp_on_unit_collective;
    fsdp.buffer_pool = o.fsdp_buffer_pool;
    return std::make_shared<lightning::FsdpTpStrategy>(mesh, fsdp);
  }
  return std::make_shared<lightning::ModelParallelStrategy>(mesh, std::move(hook));
}

}  // namespace

absl::Status CheckLmStrategy(const std::string& strategy, const std::vector<int64_t>& mesh_shape) {
  if (std::find(std::begin(kLmStrategies), std::end(kLmStrategies), strategy) == std::end(kLmStrategies)) {
    return absl::InvalidArgumentError(
        absl::StrCat("strategy '", strategy, "' is not one of ", absl::StrJoin(kLmStrategies, ", ")));
  }
  if (strategy != "model_parallel" && strategy != "fsdp_tp" && strategy != "hsdp" && mesh_shape.size() == 2 &&
      mesh_shape[1] != 1) {
    return absl::InvalidArgumentError(absl::StrCat("the ", strategy, " strategy is data parallel only: the mesh must be ",
                                                   "Nx1, not ", absl::StrJoin(mesh_shape, "x")));
  }
  return absl::OkStatus();
}

absl::Status CheckLmOptimizer(const std::string& optimizer, const lightning::SgdOptions& sgd) {
  if (std::find(std::begin(kLmOptimizers), std::end(kLmOptimizers), optimizer) == std::end(kLmOptimizers)) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer '", optimizer, "' is not one of ", absl::StrJoin(kLmOptimizers, ", ")));
  }
  return optimizer == "sgd" ? lightning::CheckSgdOptions(sgd) : absl::OkStatus();
}

absl::Status CheckLmMixedPrecision(const std::string& strategy, const std::string& param_dtype,
                                   const std::string& reduce_dtype) {
  for (const auto& [what, name] : {std::pair{"param_dtype", &param_dtype}, std::pair{"reduce_dtype", &reduce_dtype}}) {
    if (name->empty()) continue;
    if (strategy != "fsdp" && strategy != "hsdp") {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " (fsdp's mixed-precision policy) applies to the fsdp and hsdp strategies only, not ", strategy));
    }
    SL_RETURN_IF_ERROR(lightning::ParseFloatDtype(*name, what).status());
  }
  return absl::OkStatus();
}

absl::StatusOr<LmRankResult> RunLmRank(const LmJobOptions& o, const sharded::mesh::MeshContext& ctx) {
  c10d::ProcessGroup& world = *ctx.world;
  // Setup checks, agreed: each rank's error is every rank's, before any mesh work.
  absl::StatusOr<ByteCorpus> corpus = ByteCorpus::Load(o.corpus, o.model.context);
  absl::Status setup = corpus.status();
  if (setup.ok() && o.mesh_shape.size() != 2) {
    setup = absl::InvalidArgumentError(absl::StrCat("the LM job needs a 2-d mesh (data parallel x tensor parallel), not ",
                                                    absl::StrJoin(o.mesh_shape, "x")));
  }
  if (setup.ok()) setup = CheckLmStrategy(o.strategy, o.mesh_shape);
  if (setup.ok()) setup = CheckLmOptimizer(o.optimizer, o.sgd);
  if (setup.ok()) setup = CheckLmMixedPrecision(o.strategy, o.param_dtype, o.reduce_dtype);
  if (setup.ok()) setup = sharded::mesh::ValidateMeshShape(o.mesh_shape, ctx.world_size);
  const bool hsdp = o.strategy == "hsdp";
  if (setup.ok()) setup = CheckGptOptions(o.model, hsdp ? 1 : o.mesh_shape[1]);  // hsdp: no TP
  // hsdp: every rank is data parallel.
  const int64_t data_parallel = hsdp ? ctx.world_size : o.mesh_shape[0];
  if (setup.ok() && o.batch < data_parallel) {
    setup = absl::InvalidArgumentError(
        absl::StrCat("a global batch of ", o.batch, " cannot be split over ", data_parallel, " data-parallel ranks"));
  }
  if (setup.ok() && o.grads_steps > 0 && o.grads_dir.empty()) {
    setup = absl::InvalidArgumentError("saving the gradients of the first steps needs a directory (grads_dir)");
  }
  const bool model_parallel = o.strategy == "model_parallel";
  const bool fsdp_tp = o.strategy == "fsdp_tp";  // the model's TP build, chunked over DP
  if (setup.ok() && o.model.deferred_init && (model_parallel || fsdp_tp)) {
    setup = absl::InvalidArgumentError(absl::StrCat(
        "deferred initialisation (GptOptions::deferred_init) applies to the dense build (fsdp, hsdp, ddp); ",
        o.strategy, " builds each rank's tensor-parallel slices and would ignore it"));
  }
  if (setup.ok() && o.grads_steps > 0 && !model_parallel) {
    setup = absl::InvalidArgumentError(
        absl::StrCat("saving the gradients of the first steps is done under model_parallel only, not ", o.strategy));
  }
  if (setup.ok() && o.save_format != "shardlight" && o.save_format != "torch_dcp") {
    setup = absl::InvalidArgumentError(absl::StrCat("save_format '", o.save_format, "' is not shardlight or torch_dcp"));
  }
  if (setup.ok() && o.save_format == "torch_dcp" && (model_parallel || fsdp_tp || hsdp || o.save_at < 0)) {
    setup = absl::InvalidArgumentError(absl::StrCat(
        "save_format torch_dcp saves at save_at (>= 0, not ", o.save_at, ") under fsdp or ddp (not ", o.strategy,
        "): torch.optim.AdamW over whole parameters is what it names"));
  }
  if (setup.ok() && o.save_format == "torch_dcp" && o.optimizer != "adamw") {
    setup = absl::InvalidArgumentError(absl::StrCat("save_format torch_dcp writes torch.optim.AdamW's state under "
                                                    "torch's names; optimizer ", o.optimizer, " has no such mapping"));
  }
  if (setup.ok() && (o.checkpoint_every < 0 || o.keep_last < 0)) {
    setup = absl::InvalidArgumentError(absl::StrCat("checkpoint_every (", o.checkpoint_every, ") and keep_last (",
                                                    o.keep_last, ") must be >= 0"));
  }
  if (setup.ok() && o.keep_last > 0 && o.save_at >= 0) {
    setup = absl::InvalidArgumentError(absl::StrCat("save_at ", o.save_at, " saves a plain checkpoint into checkpoint_dir, "
                                                    "which keep_last ", o.keep_last, " makes a checkpoint root"));
  }
  SL_RETURN_IF_ERROR(sharded::Agree(world, setup, "LM job setup"));

  MeshPtr mesh;  // model_parallel's, fsdp_tp's and hsdp's; fsdp and ddp lay the model out over the world
  if (model_parallel || fsdp_tp || hsdp) {
    SL_ASSIGN_OR_RETURN(mesh, sharded::mesh::DeviceMesh::Create(ctx, o.mesh_shape, "lm"));
  }
  GptModel model(o.model, o.optimizer == "sgd" ? GptOptimizer(o.sgd) : GptOptimizer(o.adam));
  LmRankResult result;
  int64_t first_step = -1;  // the Fit's first step, for the gradients of its first grads_steps steps
  auto save_grads = [&](int64_t step) -> absl::Status {
    if (first_step < 0) first_step = step;
    if (step - first_step >= o.grads_steps) return absl::OkStatus();
    return SaveGrads(tp::TrainableMeshMembers(model), absl::StrCat(o.grads_dir, "/step", step + 1), world);
  };
  lightning::TrainerOptions trainer;
  trainer.max_steps = o.steps;
  trainer.seed = o.seed;
  trainer.checkpoint_dir = o.checkpoint_dir;
  trainer.checkpoint_every = o.checkpoint_every;
  trainer.keep_last = o.keep_last;
  trainer.resume = o.resume;
  trainer.save_last = o.save_at < 0;  // the end's save is the Trainer's; one at save_at is the callback's
  trainer.gradient_clip_norm = o.clip_norm;
  trainer.phase_times = o.phase_times;
  trainer.strategy =
      StrategyOf(o, mesh, o.grads_steps > 0 ? lightning::ModelParallelStrategy::ReducedHook(save_grads) : nullptr);
  auto callback = std::make_shared<LmCallback>(o, model, world, result, hsdp ? mesh : nullptr);
  std::vector<std::shared_ptr<lightning::Callback>> callbacks = {callback};
  const double global_tokens = static_cast<double>(o.batch * o.model.context);
  if (!o.log_dir.empty()) {
    lightning::loggers::LoggerOptions logging;
    logging.tokens_per_step = global_tokens;
    // Every strategy's optimizer has lr() (the rate its next step uses).
    logging.sources = {[&model](int64_t) {
      return lightning::loggers::Scalars{{"lr", model.optimizer()->lr()}};
    }};
    callbacks.push_back(std::make_shared<lightning::loggers::LoggerCallback>(
        std::vector<std::shared_ptr<lightning::loggers::ScalarLogger>>{
            std::make_shared<lightning::loggers::CsvLogger>(o.log_dir),
            std::make_shared<lightning::loggers::TensorBoardLogger>(o.log_dir)},
        logging));
  }
  if (o.progress_bar && o.log != nullptr) {
    callbacks.push_back(std::make_shared<lightning::loggers::ProgressBar>(*o.log, 1,
                                                                         lightning::loggers::ProgressBar::Mode::kBar));
  }
  lightning::Trainer t(trainer, callbacks);
  SL_ASSIGN_OR_RETURN(const lightning::FitResult fit, t.Fit(model, LmData(*corpus, o.data_seed, o.batch), ctx.world));
  result.start_step = fit.start_step;
  result.losses = fit.losses;
  const int64_t trained = static_cast<int64_t>(fit.losses.size());
  result.seconds = trained > 0 ? callback->seconds() : 0;
  if (trained > 0 && result.seconds > 0) result.tokens_per_second = trained * global_tokens / result.seconds;

  // Held-out perplexity: samples of another stream, reduced over the DP group.
  const auto [mine_first, mine_count] = sharded::ChunkRanges(o.batch, model.dp_size())[model.dp_rank()];
  if (o.eval_batches > 0) {
    lightning::metrics::Perplexity ppl;
    SL_RETURN_IF_ERROR(ppl.Bind(model.dp_group()));
    const absl::Status evaluated = sharded::NoThrow([&]() -> absl::Status {
      at::NoGradGuard no_grad;
      const auto evaluate = [&]() -> absl::Status {
        for (int64_t b = 0; b < o.eval_batches; ++b) {
          const auto [ids, targets] = corpus->Samples(o.data_seed + 1, b * o.batch + mine_first, mine_count);
          SL_RETURN_IF_ERROR(ppl.Update(model.TokenLosses(ids, targets)));
        }
        return absl::OkStatus();
      };
      if (fsdp_tp) return lightning::WithTensorParallelPieces(model, evaluate);
      return WithFullParameters(model, evaluate);
    });
    SL_RETURN_IF_ERROR(sharded::Agree(world, evaluated, "LM evaluation"));
    SL_ASSIGN_OR_RETURN(result.eval_perplexity, ppl.ComputeScalar());
  }
  // Each parameter, with AdamW's two moments or SGD's momentum buffer of its layout.
  const int64_t copies = o.optimizer == "sgd" ? 2 : 3;
  if (model.tensor_parallel()) {
    for (const auto& [key, p] : tp::TrainableMeshMembers(model)) {
      result.state_bytes += copies * p->local().numel() * p->local().element_size();
    }
  } else {
    for (const at::Tensor& p : lightning::TrainablesOf(model).LocalTensors()) {  // fsdp: the shards
      result.state_bytes += copies * p.numel() * p.element_size();
    }
  }
  result.peak_rss_bytes = PeakRssBytes();
  return result;
}

}  // namespace shardlight::simulate
