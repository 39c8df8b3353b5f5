// ModelCheckpoint: Lightning's ModelCheckpoint(monitor, mode, save_top_k) as
// a Callback the Trainer knows. Pass it among the Trainer's callbacks (at
// most one) with a checkpoint_dir and a validation source: checkpoint_dir is
// then a checkpoint root (sharded/checkpoint/roots/checkpoint_root.h) that
// keeps the best save_top_k validated steps by `monitor`, plus the newest
// save (`latest`, what a resume loads -- Lightning's last.ckpt).
//
// After each validation run (OnValidationEnd) the step is ranked as
// Lightning 2.x ranks it (check_monitor_top_k / _update_best_and_save):
// while fewer than k steps are kept, it enters; otherwise it enters only
// when strictly better than the k-th best (mode "min": lower; "max":
// higher), which it then replaces. A tie with the k-th best does not enter;
// among tied worst steps the earliest entered is the one replaced (Python's
// max() over the insertion-ordered best_k_models). A NaN enters only while
// fewer than k are kept, ranked as +inf ("min") / -inf ("max").
// save_top_k -1 keeps every validated step; 0 keeps none (only `latest`).
// A step that enters is saved right after its validation; a step that falls
// out is deleted by the root's retention only after the new save is
// committed and `latest` names it (rank 0 deletes; every rank agrees on the
// set first). The metrics are reduced across ranks, so every rank ranks
// alike.
//
// Its state -- the best steps and their scores, in the order they entered --
// is in every checkpoint (tensors "callbacks.model_checkpoint.best_steps",
// ".best_scores", of a fixed length: save_top_k, or for -1 the number of
// validations max_steps allows), so a resume continues the same ranking. A
// resume with another save_top_k (another length) fails naming the key.
//
// Errors: Create: InvalidArgument for an empty monitor, a mode other than
// "min"/"max", save_top_k < -1. Fit, before training, on every rank:
// InvalidArgument when there is no checkpoint_dir, no validation source,
// keep_last > 0 (both choose what the root keeps), async_checkpoint (not
// supported with it yet), or two ModelCheckpoints; a monitor that
// ValidationStep does not log fails the Trainer's sanity pass (before the
// first step, naming the key and what is logged).
#ifndef SHARDLIGHT_LIGHTNING_MODEL_CHECKPOINT_H_
#define SHARDLIGHT_LIGHTNING_MODEL_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/statusor.h"
#include "lightning/callback.h"
#include "sharded/state_dict.h"

namespace shardlight::lightning {

struct ModelCheckpointOptions {
  std::string monitor;
  std::string mode = "min";
  int64_t save_top_k = 1;
};

class ModelCheckpoint : public Callback {
 public:
  static absl::StatusOr<std::shared_ptr<ModelCheckpoint>> Create(ModelCheckpointOptions options);

  // Ranks `step` by its metrics (InvalidArgument when the monitor is not among them).
  absl::Status OnValidationEnd(const TrainState&, int64_t step, const std::map<std::string, double>& metrics) override;
  std::vector<std::string> MonitoredKeys() const override { return {options_.monitor}; }

  // Whether `step`'s validation entered the best k (the Trainer saves it).
  bool Entered(int64_t step) const { return entered_ == step; }
  // Lightning's best_k_models: (step, score) in the order they entered.
  const std::vector<std::pair<int64_t, double>>& best_k_models() const { return best_; }
  // The kept steps, ascending.
  std::vector<int64_t> BestSteps() const;
  // The best step (its score: best_k_models); -1 when none yet.
  int64_t best_model_step() const;
  // "ModelCheckpoint(monitor='val_loss', mode='min', save_top_k=2)".
  std::string Describe() const;
  const ModelCheckpointOptions& options() const { return options_; }

  // The Trainer's: the length of the state tensors for a run of `max_steps`
  // validating every `val_check_interval` steps.
  void Bind(int64_t max_steps, int64_t val_check_interval);
  // Writes the ranking into the state tensors and inserts them under `prefix`.
  absl::Status AddStateTo(sharded::StateDict& dict, const std::string& prefix);
  // After a resume loaded the state tensors: the ranking from them.
  void RestoreFromState();
  void Reset() { best_.clear(); entered_ = -1; }

 private:
  explicit ModelCheckpoint(ModelCheckpointOptions options) : options_(std::move(options)) {}
  // Index in best_ of the k-th best (the one a better step replaces).
  size_t KthIndex() const;

  ModelCheckpointOptions options_;
  std::vector<std::pair<int64_t, double>> best_;
  int64_t entered_ = -1;
  at::Tensor steps_;   // int64 [capacity], -1 past the kept ones
  at::Tensor scores_;  // double [capacity]
};

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_MODEL_CHECKPOINT_H_
