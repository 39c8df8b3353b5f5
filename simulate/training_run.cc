#include "simulate/training_run.h"

#include <stdlib.h>

#include <filesystem>
#include <iomanip>
#include <thread>

#include "absl/strings/str_cat.h"
#include "lightning/trainer.h"
#include "sharded/stable_hash.h"
#include "simulate/core/simulated_cluster.h"
#include "simulate/fault_injector.h"

namespace shardlight::simulate {
namespace {

// Collective: every rank gets the module's global state.
absl::StatusOr<ModelSnapshot> Snapshot(EmbeddingMlp& module) {
  ModelSnapshot snap;
  for (auto& p : module.parameters()) snap.dense.push_back(p.detach().clone());
  auto table = module.table()->FullTensor();
  if (!table.ok()) return table.status();
  snap.table = *table;
  return snap;
}

class SnapshotOnLoad : public lightning::Callback {
 public:
  explicit SnapshotOnLoad(EmbeddingMlp& module) : module_(module) {}
  absl::Status OnLoadCheckpoint(const lightning::TrainState&, int64_t, const std::string&) override {
    auto snap = Snapshot(module_);
    if (!snap.ok()) return snap.status();
    taken = *std::move(snap);
    return absl::OkStatus();
  }
  std::optional<ModelSnapshot> taken;

 private:
  EmbeddingMlp& module_;
};

// Paces steps to TrainingRunOptions::min_step_time.
class MinStepTime : public lightning::Callback {
 public:
  explicit MinStepTime(std::chrono::milliseconds min) : min_(min) {}
  absl::Status OnTrainStart(const lightning::TrainState&) override {
    last_ = std::chrono::steady_clock::now();
    return absl::OkStatus();
  }
  absl::Status OnStepEnd(const lightning::TrainState&, int64_t, double) override {
    std::this_thread::sleep_until(last_ + min_);
    last_ = std::chrono::steady_clock::now();
    return absl::OkStatus();
  }

 private:
  std::chrono::milliseconds min_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace

bool ModelSnapshot::Equals(const ModelSnapshot& other) const {
  if (dense.size() != other.dense.size() || !at::equal(table, other.table)) return false;
  for (size_t i = 0; i < dense.size(); ++i) {
    if (!at::equal(dense[i], other.dense[i])) return false;
  }
  return true;
}

absl::StatusOr<RankResult> TrainRank(const TrainingRunOptions& options, c10::intrusive_ptr<c10d::ProcessGroup> pg) {
  const auto start = std::chrono::steady_clock::now();
  EmbeddingMlp module(options.model);
  lightning::TrainerOptions trainer_options;
  trainer_options.max_steps = options.max_steps;
  trainer_options.seed = options.seed;
  trainer_options.checkpoint_dir = options.checkpoint_dir;
  trainer_options.checkpoint_every = options.checkpoint_every;
  trainer_options.keep_last = options.keep_last;
  trainer_options.async_checkpoint = options.async_checkpoint;
  trainer_options.async_staging_bytes = options.async_staging_bytes;
  trainer_options.groups = options.groups;
  trainer_options.probe_timeout = options.collective_timeout;
  trainer_options.log_every = options.log_every;
  // With the seed and the model's structure, what makes two runs different.
  trainer_options.run_options = {{"batch_size", absl::StrCat(options.batch_size)},
                                 {"lr", absl::StrCat(options.model.lr)},
                                 {"momentum", absl::StrCat(options.model.momentum)}};
  trainer_options.allow_different_run = options.allow_different_run;
  auto on_load = std::make_shared<SnapshotOnLoad>(module);
  std::vector<std::shared_ptr<lightning::Callback>> callbacks = {on_load};
  if (options.min_step_time.count() > 0) callbacks.push_back(std::make_shared<MinStepTime>(options.min_step_time));
  if (options.fault) {
    auto injector = std::make_shared<FaultInjector>(*options.fault, options.collective_timeout, options.checkpoint_every);
    trainer_options.save_options.storage = injector->SaveStorage();
    callbacks.push_back(injector);
  }
  callbacks.insert(callbacks.end(), options.callbacks.begin(), options.callbacks.end());
  lightning::Trainer trainer(trainer_options, callbacks);
  SyntheticRegression data(options.model.vocab, options.batch_size, options.seed);
  auto fit = trainer.Fit(module, data, pg);
  if (!fit.ok()) return fit.status();
  RankResult outcome;
  RankSummary& s = outcome.summary;
  s.rank = pg->getRank();
  for (const auto& shard : module.table()->local_shards()) s.table_rows += shard.metadata.sizes[0];
  s.start_step = fit->start_step;
  s.end_step = fit->end_step;
  if (!fit->losses.empty()) {
    s.first_loss = fit->losses.front();
    s.last_loss = fit->losses.back();
  }
  s.checkpoints_saved = fit->checkpoints_saved;
  auto snap = Snapshot(module);
  if (!snap.ok()) return snap.status();
  outcome.final_state = *std::move(snap);
  outcome.loaded_state = on_load->taken;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return outcome;
}

absl::StatusOr<TrainingRunResult> RunTraining(const TrainingRunOptions& options) {
  if (options.fault && options.fault->rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("fault plan ", options.fault->ToString(), " names rank ",
                                                   options.fault->rank, " of a ", options.world_size, "-rank run"));
  }
  ClusterOptions cluster_options;
  cluster_options.collective_timeout = options.collective_timeout;
  SimulatedCluster cluster(options.world_size, cluster_options);
  auto outcomes = cluster.Run([&](RankContext& ctx) {
    TrainingRunOptions rank_options = options;
    rank_options.groups = ctx.groups;
    return TrainRank(rank_options, ctx.pg);
  });
  if (!outcomes.ok()) return outcomes.status();
  TrainingRunResult result;
  for (auto& o : *outcomes) result.ranks.push_back(o.summary);
  result.final_state = (*outcomes)[0].final_state;
  result.loaded_state = (*outcomes)[0].loaded_state;
  return result;
}

std::string TensorsDigest(const std::vector<at::Tensor>& tensors) {
  std::string bytes;
  for (const at::Tensor& t : tensors) {
    const at::Tensor c = t.contiguous();
    absl::StrAppend(&bytes, c.sizes().size(), ":", c.numel(), ":",
                    absl::string_view(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size()));
  }
  return absl::StrCat(absl::Hex(sharded::StableHash(bytes), absl::kZeroPad16));
}

std::string ModelSnapshot::Digest() const {
  std::vector<at::Tensor> all = dense;
  all.push_back(table);
  return TensorsDigest(all);
}

void PrintRankTable(const std::string& title, const TrainingRunResult& result, std::ostream& out) {
  out << title << "\n"
      << "rank  table_rows  steps      first_loss   last_loss  checkpoints  seconds\n";
  for (const RankSummary& s : result.ranks) {
    out << std::setw(4) << s.rank << std::setw(12) << s.table_rows << std::setw(5) << s.start_step << "->"
        << std::left << std::setw(4) << s.end_step << std::right << std::fixed << std::setprecision(6)
        << std::setw(12) << s.first_loss << std::setw(12) << s.last_loss << std::setw(13) << s.checkpoints_saved
        << std::setprecision(2) << std::setw(9) << s.seconds << "\n";
  }
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(base && *base ? base : "/tmp", "/shardlight-XXXXXX");
  if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

}  // namespace shardlight::simulate
