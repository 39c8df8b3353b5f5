// The LM job: GptModel (gpt_model.h) trained on byte tokens of a text corpus
// (byte_corpus.h) on a DP x TP device mesh -- AdamW with decoupled weight
// decay (or SGD with momentum: LmJobOptions::optimizer), the gradient
// clipped to a global norm across the mesh, the loss the mean token
// cross-entropy of the global batch -- with checkpoints of model,
// optimizer and step that resume on any other mesh. One code path for
// thread-ranks (`//simulate:cluster --scenario=lm`) and processes
// (`//tools/train --job=lm --mesh=DPxTP` under torchrun): both call RunLmRank
// with the MeshContext of their ranks.
//
// Trained by lightning::Trainer with the strategy LmJobOptions::strategy
// names: model_parallel (the default) on the mesh -- the model builds its TP
// layers from the mesh in its configure hook, the strategy sums the
// gradients over the DP dim and clips over the mesh, AdamW is
// tp::MeshAdamWOptimizer --, fsdp_tp on the mesh (the same model, its TP
// pieces chunked again over the DP ranks, gathered for each step), or
// fsdp / ddp on an Nx1 mesh (data parallel
// only): the model's dense build, fully_shard per block under fsdp (one
// block gathered at a time unless fsdp_per_unit is off), lightning::AdamW
// (SGD: tp::MeshSgdOptimizer on the mesh, lightning::Sgd on the dense
// build). Resume (shardlight's checkpoint or a PyTorch DCP one) is the
// Trainer's; checkpoint keys are the same under every strategy. The job
// adds the save at save_at (a callback), the log lines and the held-out
// perplexity.
//
// Errors, on every rank before training: InvalidArgument for a strategy
// that is not one of kLmStrategies, a mesh that is not 2-d or does
// not match the world, a TP size > 1 under fsdp or ddp, an optimizer that is
// not one of kLmOptimizers or SGD options CheckSgdOptions refuses
// (CheckLmOptimizer), gradient dumps (grads_steps) under fsdp or ddp, a
// model the TP size does not fit (CheckGptOptions), a global batch smaller than the DP size, a
// mixed-precision policy under another strategy than fsdp or naming no
// floating dtype (CheckLmMixedPrecision); NotFound / InvalidArgument for a
// missing or empty corpus; the checkpoint's error
// (naming the key) for a checkpoint of another model shape; InvalidArgument
// for grads_steps > 0 without grads_dir; InvalidArgument for
// GptOptions::deferred_init under model_parallel or fsdp_tp (the TP build);
// InvalidArgument for a save_format
// other than shardlight or torch_dcp, and torch_dcp under model_parallel, fsdp_tp or
// hsdp, with sgd, or without a save_at >= 0; InvalidArgument for a negative checkpoint_every or
// keep_last, or keep_last > 0 with a save_at >= 0.
#ifndef SHARDLIGHT_SIMULATE_LM_RUN_H_
#define SHARDLIGHT_SIMULATE_LM_RUN_H_

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lightning/phase_times.h"
#include "lightning/tp/mesh_adamw.h"
#include "sharded/mesh/device_mesh.h"
#include "simulate/byte_corpus.h"
#include "simulate/gpt_model.h"

namespace shardlight::simulate {

// The strategies the LM job trains under (LmJobOptions::strategy).
inline constexpr const char* kLmStrategies[] = {"model_parallel", "fsdp_tp", "fsdp", "ddp", "hsdp"};
// The optimizers it trains with (LmJobOptions::optimizer).
inline constexpr const char* kLmOptimizers[] = {"adamw", "sgd"};

struct LmJobOptions {
  // Data parallel x tensor parallel; under hsdp, (replicate, shard).
  std::vector<int64_t> mesh_shape = {2, 2};
  // model_parallel; fsdp_tp (the same DP x TP model, each TP piece chunked
  // again over the DP ranks: lightning::FsdpTpStrategy); fsdp, ddp (the
  // last two: mesh_shape Nx1); or hsdp:
  // fsdp's units and options, sharded over mesh_shape[1] ranks and
  // replicated over mesh_shape[0] (lightning::FsdpStrategy::Hybrid; every
  // rank is data parallel: the batch splits over the world).
  std::string strategy = "model_parallel";
  // fsdp only: gather one block (FSDP unit) at a time inside the step --
  // FsdpOptions::per_unit with reshard_after_forward and prefetch, what
  // fully_shard does by default -- so a rank holds the root and at most two
  // blocks unsharded; false: the whole model is gathered for the step.
  bool fsdp_per_unit = true;
  // fsdp / hsdp with fsdp_per_unit: FsdpOptions::prefetch (issue the next
  // unit's all-gather before waiting for this one's; false: each gather is
  // issued where it is waited for, as FSDP2's synchronous CPU gathers).
  bool fsdp_prefetch = true;
  // fsdp / hsdp / fsdp_tp: FsdpOptions::buffer_pool (transient buffers from
  // a pool of mapped blocks; false: malloc).
  bool fsdp_buffer_pool = true;
  // fsdp with fsdp_per_unit, for tests and memory tools:
  // FsdpOptions::on_unit_forward (the unit's name and this rank's bytes of
  // unsharded parameters on entering its forward). Called on each rank's
  // own thread.
  std::function<void(const std::string& unit, int64_t unsharded_bytes)> fsdp_on_unit_forward;
  // fsdp with fsdp_per_unit, or fsdp_tp (its one unit: "model",
  // FsdpTpStrategy::kUnit), for fault tools: FsdpOptions::on_unit_collective
  // ("all-gather" or "reduce-scatter", the unit, the 0-based step), called
  // as the rank enters that collective (tools/train --die_in kills the
  // process there).
  std::function<void(const std::string& collective, const std::string& unit, int64_t step)> fsdp_on_unit_collective;
  // fsdp only: the mixed-precision policy (FsdpOptions::param_dtype,
  // reduce_dtype; FSDP2's MixedPrecisionPolicy) by name -- "bf16",
  // "fp32", torch's "bfloat16", ... (lightning::ParseFloatDtype); "": the
  // parameters' own dtype (GptOptions::dtype, the master copy's). Parameters
  // gathered, the forward and backward (activations, logits, the loss) in
  // param_dtype; gradients summed in reduce_dtype; AdamW on the masters.
  std::string param_dtype;
  std::string reduce_dtype;
  GptOptions model;
  std::string corpus = kDefaultCorpus;
  int64_t batch = 8;  // global samples per step
  int64_t steps = 20;  // the global step to train to
  uint64_t seed = 1234;     // model initialisation
  uint64_t data_seed = 1;   // sample offsets (SampleOffset)
  // "adamw" (`adam`: GPT's two groups, decoupled weight decay on >= 2-dim
  // tensors) or "sgd" (`sgd`: torch.optim.SGD, one group, weight decay added
  // to every parameter's gradient), under every strategy (GptOptimizer).
  std::string optimizer = "adamw";
  lightning::tp::AdamWOptions adam{1e-3, 0.9, 0.95, 1e-8, 0.1};
  lightning::SgdOptions sgd{1e-3, 0.9, 0.0};
  double clip_norm = 1.0;
  std::string checkpoint_dir;  // empty: no checkpoint, no resume
  // The Trainer's periodic saves (TrainerOptions::checkpoint_every, keep_last):
  // every this many steps (0: none in between); keep_last > 0 makes
  // checkpoint_dir a checkpoint root of step-N/ checkpoints keeping the
  // newest keep_last (then save_at must be -1: its save is a plain one).
  int64_t checkpoint_every = 0;
  int keep_last = 0;
  // Save after this global step (0: before training -- the initial weights);
  // -1: after the last step. A run that resumed at this step does not save
  // it again.
  int64_t save_at = -1;
  // The format of the save at save_at: "shardlight" (the Trainer's checkpoint),
  // or "torch_dcp" (fsdp and ddp, save_at >= 0): a PyTorch DCP directory under
  // torch's own names, as dcp.save of get_model_state_dict /
  // get_optimizer_state_dict writes it (lightning/torch_checkpoint.h), which a
  // PyTorch FSDP2 run at any world size loads with get_state_dict, dcp.load
  // and set_state_dict; a resume of this job reads it back.
  std::string save_format = "shardlight";
  // Load checkpoint_dir's committed checkpoint first: shardlight's own, else
  // a PyTorch DCP checkpoint (torch.distributed.checkpoint.save) holding
  // the keys shardlight saves -- "model.<parameter>" (all of them),
  // "optimizer.<parameter>.exp_avg" and ".exp_avg_sq", "optimizer.step" (the
  // optimizer starts fresh without all of these, said on rank 0) and
  // "trainer.step" (int64 [1]), as tools/lm/lm_peer.py --dcp_dir writes, or
  // under torch's own names (model., optim.state., optim.param_groups.: a
  // PyTorch FSDP2 run's dcp.save, lm_peer.py --fsdp --torch_dcp_dir): the
  // Trainer's resume (lightning/trainer.h).
  bool resume = true;
  int64_t eval_batches = 2;  // held-out batches (data_seed + 1) for perplexity
  int64_t log_every = 0;     // rank 0 prints a line every this many steps
  // Rank 0 draws a progress bar (lightning/loggers/progress_bar.h) on `log`
  // in place of the step lines (for a terminal).
  bool progress_bar = false;
  // Non-empty: rank 0 writes each step's loss, learning rate, steps/s and tokens/s to
  // log_dir/metrics.csv and a TensorBoard event file there
  // (lightning/loggers); a log_dir that is a file or not writable fails
  // every rank before training, naming it.
  std::string log_dir;
  // Parity debugging: the gradients of the first grads_steps steps trained
  // (summed over DP, before clipping) are saved as checkpoints
  // grads_dir/step<K> (K the global step), keys "grad.<parameter>".
  std::string grads_dir;
  int64_t grads_steps = 0;
  std::ostream* log = nullptr;
  // Not null: the Trainer adds this rank's step time by phase to it
  // (TrainerOptions::phase_times); owned by the caller.
  lightning::PhaseTimes* phase_times = nullptr;
};

struct LmRankResult {
  int64_t start_step = 0;      // the resumed step (0: fresh)
  bool resumed_from_dcp = false;  // the resumed checkpoint was a PyTorch DCP one
  std::vector<double> losses;  // global loss of each step trained
  double eval_perplexity = 0;  // exp(mean token loss) on the held-out batches
  double seconds = 0;          // training loop wall time
  double tokens_per_second = 0;
  int64_t state_bytes = 0;     // this rank's parameters + optimizer state (AdamW moments, SGD momentum)
  int64_t peak_rss_bytes = 0;  // the process's peak resident set at the end
};

// Local: InvalidArgument when `strategy` is not one of kLmStrategies, or is
// fsdp / ddp with a TP size (mesh_shape[1]) other than 1.
absl::Status CheckLmStrategy(const std::string& strategy, const std::vector<int64_t>& mesh_shape);

// Local: InvalidArgument when `optimizer` is not one of kLmOptimizers, or is
// sgd with options CheckSgdOptions refuses.
absl::Status CheckLmOptimizer(const std::string& optimizer, const lightning::SgdOptions& sgd);

// Local: InvalidArgument naming the option for a param_dtype or reduce_dtype
// (LmJobOptions) that is not a floating dtype's name, or for either set under
// a strategy other than fsdp.
absl::Status CheckLmMixedPrecision(const std::string& strategy, const std::string& param_dtype,
                                   const std::string& reduce_dtype);

// Collective over ctx.world.
absl::StatusOr<LmRankResult> RunLmRank(const LmJobOptions& options, const sharded::mesh::MeshContext& ctx);

}  // namespace shardlight::simulate

#endif  // SHARDLIGHT_SIMULATE_LM_RUN_H_
