// The GPT workload of fsdp_memory_bench (--model=gpt): simulate::GptModel's
// dense build trained with AdamW under per-unit fsdp (one unit per block,
// GptModel::FsdpUnits), whole-model fsdp or ddp, with deferred
// initialisation (GptOptions::deferred_init) so that no rank ever holds the
// whole model. Its batches are a fixed function of the step that
// fsdp_memory_peer.py --model=gpt computes alike: ids[b, t] = (131 b + 31 t
// + 17 step) mod vocab, targets (7 ids + 3) mod vocab.
#ifndef SHARDLIGHT_TOOLS_BENCH_FSDP_MEMORY_GPT_H_
#define SHARDLIGHT_TOOLS_BENCH_FSDP_MEMORY_GPT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lightning/callback.h"
#include "lightning/trainer.h"
#include "simulate/gpt_model.h"

namespace shardlight::tools::bench {

struct GptMemoryRun {
  simulate::GptOptions model;
  int64_t batch = 4;  // samples per step over all ranks, each `model.context` tokens
  int steps = 3;
  std::string strategy = "fsdp";  // fsdp (per-unit), fsdp_whole or ddp
  bool prefetch = true;
  bool buffer_pool = true;  // FsdpOptions::buffer_pool
  // Called on each rank after each optimizer step (e.g. to read its RSS).
  std::function<void(int64_t step)> on_step;
};

// The batch of `step`: (ids, targets) [batch, context] int64.
lightning::Batch GptMemoryBatch(const simulate::GptOptions& model, int64_t batch, int64_t step);

// Trains `run` on `pg` (collective); this rank's losses. InvalidArgument for
// an unknown strategy; the Trainer's errors.
absl::StatusOr<std::vector<double>> TrainGptMemory(const GptMemoryRun& run, c10::intrusive_ptr<c10d::ProcessGroup> pg);

// A callback that calls `fn(step)` at the end of each step.
std::shared_ptr<lightning::Callback> StepEndCallback(std::function<void(int64_t step)> fn);

// Parameters of the whole model and of one block (an fsdp unit).
int64_t GptParameterCount(const simulate::GptOptions& model);
int64_t GptBlockParameterCount(const simulate::GptOptions& model);

}  // namespace shardlight::tools::bench

#endif  // SHARDLIGHT_TOOLS_BENCH_FSDP_MEMORY_GPT_H_
