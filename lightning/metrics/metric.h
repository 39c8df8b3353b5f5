// Metric: a value accumulated over batches on every rank and computed over
// all of them -- torchmetrics' idea, with state that may itself be sharded.
//
// A metric declares its states in its constructor:
//   - reduced states (sum, mean, min, max, cat): each rank accumulates a local
//     delta; Sync() folds every rank's deltas into a global value that is the
//     same on every rank. A mean state is a (weighted sum, weight) pair, so a
//     rank with no data adds nothing and the global mean weighs every sample
//     once (never a mean of per-rank means). A cat state concatenates rows in
//     rank order per fold; what a fold concatenated keeps its order through
//     checkpoints at any world size.
//   - sharded states: a ShardedTensor created by Bind (collective) with a
//     chunk layout over the group; updates are buffered locally as
//     (index, value) pairs and Sync() routes each to the rank owning it, so
//     no rank ever holds more than its shard plus its own pending pairs.
//
// Update (derived classes) is local. An update that is inconsistent (wrong
// shape, dtype, class id out of range) changes nothing, returns the error and
// poisons the metric until Reset(): the next Sync/Compute -- collective --
// agrees on every rank's verdict first (sharded::AgreeOn, sharded/agreement.h) so every rank fails
// with the failing rank's error ("rank R: metric 'acc': ...") and nothing
// hangs. Ranks whose metrics are configured differently fail the same way.
//
// State dicts: the metric's reduced states are dense entries under its prefix
// ("acc.correct"; a mean adds "<state>.weight", a cat "<state>.rows"); they
// hold the global (synced) value, identical on every rank, so they load on any
// world size: a loaded value becomes the global base and local deltas start
// empty. Sharded states are sharded members (the enclosing LightningModule's
// hooks carry them; a checkpoint reshards them). StateDictOf of a module with
// bound metrics is therefore collective: it syncs them first.
#ifndef SHARDLIGHT_LIGHTNING_METRICS_METRIC_H_
#define SHARDLIGHT_LIGHTNING_METRICS_METRIC_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lightning/sharded_module.h"
#include "sharded/state_dict.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::sharded::checkpoint {
class Storage;  // sharded/checkpoint/storage/storage.h
}  // namespace shardlight::sharded::checkpoint

namespace shardlight::lightning::metrics {

enum class Reduction { kSum, kMean, kMin, kMax, kCat };
const char* ReductionName(Reduction reduction);

class Metric : public ShardedModule {
 public:
  using ProcessGroupPtr = c10::intrusive_ptr<c10d::ProcessGroup>;

  explicit Metric(std::string name);

  // Collective. Sets the group the metric reduces over and creates its
  // sharded states. Without a group the metric is single-process (Sync folds
  // locally) and cannot hold sharded states. Binding again is an error.
  absl::Status Bind(ProcessGroupPtr pg);
  const ProcessGroupPtr& process_group() const { return pg_; }

  // Collective when bound: agreement, then every rank's local updates folded
  // into the global states (the same on every rank afterwards).
  absl::Status Sync();
  // Collective: Sync, then the value -- the same on every rank. Dense for
  // most metrics; a ShardedTensor for metrics whose value is sharded.
  absl::StatusOr<sharded::StateValue> Compute();
  // Collective: a one-number summary for logs. The default is Compute() of a
  // one-element value.
  virtual absl::StatusOr<double> ComputeScalar();
  // Local: every state back to its identity, the error cleared. Call it on
  // every rank.
  void Reset();

  // The first inconsistent update since Reset (OK if none).
  const absl::Status& error() const { return error_; }
  // Bytes this rank holds for the metric's states (global, local, sharded, pending).
  int64_t StateBytes() const;

  // State-dict plumbing (the hooks the constructor registers call these).
  absl::Status AddToStateDict(StateDict& dict, const std::string& prefix);
  absl::Status RestoreFromStateDict(StateDict& dict, const std::string& prefix, LoadReport& report);
  // For checkpoint loads that need sizes up front: every cat state's rows key.
  std::vector<std::string> CatRowsKeys(const std::string& prefix) const;
  // Resizes cat state `rows_key` (from CatRowsKeys) to `rows` rows.
  absl::Status ResizeCatState(const std::string& prefix, const std::string& rows_key, int64_t rows);

 protected:
  // Declarations: call in the constructor. Names are non-empty without '.'.
  // `shape` is the state's shape; for kCat the shape of one row.
  void AddState(const std::string& name, std::vector<int64_t> shape, c10::ScalarType dtype, Reduction reduction);
  // A sum-reduced state sharded along `chunk_dim` over the bound group.
  void AddShardedState(const std::string& name, std::vector<int64_t> sizes, c10::ScalarType dtype,
                       int64_t chunk_dim = 0);

  // Local updates (after the derived class validated its input).
  at::Tensor& Local(const std::string& name);  // sum/min/max: the delta to mutate in place
  void AddToMean(const std::string& name, const at::Tensor& weighted_sum, const at::Tensor& weight);
  void Append(const std::string& name, const at::Tensor& rows);
  // Adds values[i] at global index indices[i] (indices: [n, ndim] int64).
  void AccumulateSharded(const std::string& name, const at::Tensor& indices, const at::Tensor& values);

  // Reads after Sync: the global value (a mean: weighted sum / weight).
  at::Tensor Global(const std::string& name) const;
  at::Tensor MeanWeight(const std::string& name) const;
  sharded::ShardedTensor* Sharded(const std::string& name);

  // Records `status` (prefixed with the metric's name) as this metric's
  // error and returns it. Use for every rejected update.
  absl::Status Reject(const absl::Status& status);
  // Fails the update when the metric is misdeclared or already poisoned.
  absl::Status CheckUsable() const;

  // The value from the synced states.
  virtual absl::StatusOr<sharded::StateValue> ComputeValue() = 0;
  // Options that must agree across ranks (num_classes, top_k, ...).
  virtual std::string Describe() const { return ""; }

 private:
  struct State {
    std::string name;
    Reduction reduction = Reduction::kSum;
    std::vector<int64_t> shape;
    c10::ScalarType dtype = c10::kDouble;
    at::Tensor global;          // mean: weighted sum
    at::Tensor local;           // mean: weighted sum
    at::Tensor global_weight;   // mean only
    at::Tensor local_weight;    // mean only
    std::vector<at::Tensor> pending_rows;  // cat only
  };
  struct ShardedState {
    std::string name;
    std::vector<int64_t> sizes;
    c10::ScalarType dtype = c10::kLong;
    int64_t chunk_dim = 0;
    std::vector<at::Tensor> pending_indices;
    std::vector<at::Tensor> pending_values;
  };

  State* Find(const std::string& name);
  const State* Find(const std::string& name) const;
  void ResetState(State& state);
  uint64_t Fingerprint() const;
  absl::Status SyncDense(State& state);
  absl::Status SyncSharded(ShardedState& state);

  std::deque<State> states_;
  std::deque<ShardedState> sharded_states_;
  ProcessGroupPtr pg_;
  absl::Status error_;
  absl::Status declaration_error_;
  HookHandle state_dict_hook_;
  HookHandle load_pre_hook_;
};

// Every metric in the tree under `root`, with its state-dict prefix.
std::vector<std::pair<std::string, Metric*>> MetricsOf(torch::nn::Module& root);

// Collective: binds every unbound metric in the tree to `pg` (the Trainer
// calls it after ConfigureShardedModel).
absl::Status BindMetrics(torch::nn::Module& root, Metric::ProcessGroupPtr pg);

// Collective: before a checkpoint is loaded into a state dict built from
// `root` (keys under `key_prefix`), sizes every cat state from the
// checkpoint's "<state>.rows" entries -- a cat state's size is only known
// from the checkpoint, read through `storage` (null: POSIX; the Trainer
// passes its save_options.storage). No-op without cat states. Rebuild the
// dict after.
absl::Status PrepareCheckpointLoad(torch::nn::Module& root, const std::string& key_prefix,
                                   const std::string& dir, c10d::ProcessGroup& pg,
                                   std::shared_ptr<sharded::checkpoint::Storage> storage);

}  // namespace shardlight::lightning::metrics

#endif  // SHARDLIGHT_LIGHTNING_METRICS_METRIC_H_
