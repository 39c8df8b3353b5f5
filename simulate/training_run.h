// The main job's training: TrainRank fits an EmbeddingMlp with the Trainer on
// one rank of any process group -- a thread-rank of the simulator or a real
// process under torchrun, srun or mpirun (//tools/train) -- so simulated and
// real runs share this one code path. RunTraining runs it on a simulated
// cluster and reports per rank: the building block of the train and faults
// scenarios. Snapshots hold the model's global state (dense parameters and
// the gathered sharded table) so runs on different world sizes compare.
#ifndef SHARDLIGHT_SIMULATE_TRAINING_RUN_H_
#define SHARDLIGHT_SIMULATE_TRAINING_RUN_H_

#include <chrono>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lightning/callback.h"
#include "sharded/process_groups.h"
#include "simulate/embedding_mlp.h"
#include "simulate/core/fault_plan.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::simulate {

struct ModelSnapshot {
  std::vector<at::Tensor> dense;
  at::Tensor table;
  bool Equals(const ModelSnapshot& other) const;
  // A fingerprint of every byte, as 16 hex digits: equal digests mean
  // bit-identical states, whichever world size or launcher produced them.
  std::string Digest() const;
};

// A fingerprint of every byte of `tensors` (with their ranks and sizes), as
// 16 hex digits.
std::string TensorsDigest(const std::vector<at::Tensor>& tensors);

struct TrainingRunOptions {
  int world_size = 4;  // RunTraining only; TrainRank uses the group's size
  int64_t max_steps = 10;
  uint64_t seed = 1234;
  int64_t batch_size = 32;
  std::string checkpoint_dir;  // empty: no checkpoints
  int64_t checkpoint_every = 0;
  int keep_last = 0;  // > 0: checkpoint_dir is a checkpoint root keeping this many steps (TrainerOptions)
  // Background checkpoints (TrainerOptions::async_checkpoint). TrainRank
  // needs `groups` for them (DistributedContext::groups()); RunTraining
  // passes each rank's RankContext::groups.
  bool async_checkpoint = false;
  int64_t async_staging_bytes = int64_t{256} << 20;
  std::shared_ptr<const sharded::GroupFactory> groups;
  std::chrono::milliseconds collective_timeout{std::chrono::seconds(30)};
  std::optional<FaultPlan> fault;
  // Resume a checkpoint another run wrote (TrainerOptions::allow_different_run).
  bool allow_different_run = false;
  int64_t log_every = 0;  // progress lines from rank 0
  // Each step takes at least this long (0: no pacing), so a watcher or a test
  // can act on a real run mid-way.
  std::chrono::milliseconds min_step_time{0};
  // More callbacks for the Trainer (after the run's own).
  std::vector<std::shared_ptr<lightning::Callback>> callbacks;
  EmbeddingMlpOptions model;
};

struct RankSummary {
  int rank = 0;
  int64_t table_rows = 0;  // rows of the sharded table this rank holds
  int64_t start_step = 0, end_step = 0;
  double first_loss = 0, last_loss = 0;  // of the steps this run made (0 if none)
  int checkpoints_saved = 0;
  double seconds = 0;
};

// What one rank returns.
struct RankResult {
  RankSummary summary;
  ModelSnapshot final_state;
  std::optional<ModelSnapshot> loaded_state;  // right after a resume, if there was one
};

// Collective over `pg`: one rank of the training job. Errors are the
// Trainer's (the same on every rank for a failure on one rank).
absl::StatusOr<RankResult> TrainRank(const TrainingRunOptions& options, c10::intrusive_ptr<c10d::ProcessGroup> pg);

struct TrainingRunResult {
  std::vector<RankSummary> ranks;
  ModelSnapshot final_state;
  std::optional<ModelSnapshot> loaded_state;  // right after a resume, if there was one
};

// Errors are the cluster's: the first failing rank's error, "rank R: ...".
absl::StatusOr<TrainingRunResult> RunTraining(const TrainingRunOptions& options);

// The per-rank table the scenarios print.
void PrintRankTable(const std::string& title, const TrainingRunResult& result, std::ostream& out);

// A fresh directory under $TMPDIR (or /tmp); removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace shardlight::simulate

#endif  // SHARDLIGHT_SIMULATE_TRAINING_RUN_H_
