// Trainer: fits a LightningModule on one rank of a process group (every rank
// calls Fit with the same options; it is collective throughout).
//
// Fit: probe the collectives (stop before any sharded state exists if one is
// missing) -> ConfigureShardedModel (sharded members are created once the
// group exists) -> the strategy's Setup (options.strategy, lightning/
// strategies/strategy.h: ddp by default; fsdp shards the parameters here) ->
// ConfigureOptimizers -> resume from the checkpoint in checkpoint_dir if one
// is committed there -> loop: the strategy's BeforeStep (fsdp: all-gather),
// TrainingStep and backward for each of the step's accumulate_grad_batches
// micro-batches (lightning/optimizer_step.h), the strategy's ReduceGradients
// once (ddp: dense gradients summed across ranks, sharded gradients stay
// local; fsdp: reduce-scattered to the shards), clipping (by norm or by
// value), optimizer step, LR schedule step, callbacks, a checkpoint every
// `checkpoint_every` steps and at the end.
//
// The optimizer and its LR schedule come from the module's
// ConfigureOptimizersAndSchedule (lightning_module.h); the schedule is bound
// to max_steps there, so a warm-up longer than the run is an error on every
// rank ("configure failed on rank R: ... warmup_steps ...") before training.
//
// With a ModelCheckpoint among the callbacks (lightning/model_checkpoint.h),
// checkpoint_dir is a root keeping its best save_top_k validated steps by
// its monitor plus `latest` (keep_last must then be 0): a step whose
// validation enters the best k is saved right after it, the checkpoint_every
// and end saves as below; the root's retention deletes what fell out once
// the new save is committed.
//
// Where checkpoints go (like Lightning's ModelCheckpoint with
// every_n_train_steps = checkpoint_every and save_top_k = keep_last):
// keep_last == 0 keeps one plain checkpoint in checkpoint_dir, replaced by
// each save; keep_last > 0 makes checkpoint_dir a checkpoint root
// (sharded/checkpoint/roots/checkpoint_root.h): step-<N>/ per save, `latest`
// moved once the new one is durable, the newest keep_last kept. A resume
// picks the newest good checkpoint: the root's latest, falling back to an
// older step when it fails verification (rank 0 prints which, and why); a
// root without `latest` but with a plain checkpoint in checkpoint_dir (a
// run from before keep_last was set, or `ckpt import`) resumes from that.
// A checkpoint_dir that is a root with keep_last == 0 is an error naming it.
//
// No checkpoint versus a broken one: only a checkpoint_dir without an index
// entry (empty, missing, or holding a save that never committed) starts
// from step 0. An index.json that is there but cannot be read (a dangling
// symbolic link, a link loop, a directory, a FIFO, unreadable, or failing
// verification) is an error on every rank naming it and why, before anything
// is written or removed; in a root, such a step is passed over like any
// damaged one (the fallback line says why). Whatever a resume or a save then
// removes -- the files of the checkpoint a save replaces, leftovers of saves
// that never committed, steps retention deletes -- rank 0 prints (how many
// files, where, why: "checkpoint: removed ..." / "resume: removed ...").
//
// From PyTorch: a checkpoint_dir holding no shardlight checkpoint but a
// PyTorch distributed checkpoint (DCP, a .metadata file: FSDP2, tensor
// parallel, torchtitan, or SaveDcpCheckpoint) resumes from it: the module's
// entries under "model." (every one must be there: FailedPrecondition naming
// one that is not), the step from an int entry "trainer.step", "step" or
// "global_step", or an int64 [1] tensor "trainer.step" (none: step 0, said
// on rank 0), the optimizer's state only
// where the checkpoint holds every one of its keys ("optimizer.", as this
// Trainer saves them; otherwise skipped and said on rank 0). A checkpoint
// under torch's own names -- a PyTorch FSDP2 or DDP user's dcp.save of
// {"model": get_model_state_dict, "optim": get_optimizer_state_dict}, or
// SaveTorchNamedDcp's -- resumes through torch_checkpoint.h: model.<fqn>
// and optim.state.<fqn>.<name> load into the module and the optimizer,
// every one required and nothing of another model allowed
// (FailedPrecondition on every rank naming the key, before anything is
// read); the per-parameter steps must be equal and become the optimizer's
// step and, unless an int "trainer.step", "step" or "global_step" is there,
// the training step; optim.param_groups must hold this run's settings
// (lr at the resumed step, betas, eps, weight_decay, amsgrad, ...):
// FailedPrecondition naming each difference unless allow_different_run.
// The next save
// writes shardlight's format there, which later resumes read first; the DCP
// files are left as they are.
//
// The checkpoint holds the module's state dict ("model."), the
// optimizer state ("optimizer.", sharded where its parameter is) and, as
// values (sharded/plain_value.h), its hyper-parameters
// ("optimizer.hyper_parameters": {'lr', 'betas', 'eps', 'weight_decay' ...},
// Optimizer::HyperParameters), the step ("trainer.step", an int) and the LR
// schedule's state ("lr_scheduler.last_step", "lr_scheduler.base_lr", when
// there is one; a checkpoint without it resumes the schedule at
// trainer.step, said on rank 0), so a resume -- on the same or another world
// size -- continues from exactly that state. Checkpoints of earlier releases
// (the step and the schedule's state as int64 [1] and float64 [1] tensors)
// resume too. A resume loads the Trainer's keys (those prefixes,
// "trainer.", "callbacks.model_checkpoint.") strictly and leaves any other
// entry alone (an import's, such as a Lightning file's optimizer_states),
// said on rank 0; saved hyper-parameters that differ from this run's are
// said on rank 0 (the lr only without a schedule), and this run's are used.
//
// Which run: every checkpoint records what produced it (lightning/
// run_fingerprint.h: the model's structure -- state-dict names, dtypes and
// global shapes --, the seed and run_options; not the world size, as
// resuming on another world size is a feature) in its index. A resume of a
// checkpoint whose record differs fails on every rank with
// FailedPrecondition saying what differs, before anything is loaded, unless
// allow_different_run is set (rank 0 then prints what differs and resumes;
// the next save records this run). A checkpoint without a record (older, or
// `ckpt import`) resumes as before. In a checkpoint root a step of another
// run is passed over like a damaged one (the fallback line says why), so the
// newest step of this run is resumed. A resumed step at or past max_steps
// trains nothing and saves nothing (FitResult: start_step == end_step, no
// losses): the caller says there was nothing to do.
//
// A second Fit of the same module (Lightning asks configure to be
// idempotent; here the Trainer makes it so): on the same process group,
// ConfigureShardedModel is not called again -- the sharded members the first
// Fit created are kept with their current values (the seed of the second
// Fit's options does not re-initialise them) -- while ConfigureOptimizers is
// (a fresh optimizer), and a checkpoint in checkpoint_dir is resumed as
// usual. On another group (another world size, or a new group of the same
// size) the Fit fails with FailedPrecondition on every rank, naming the
// module: its sharded members live on the first group; fit a fresh module
// and resume it from a checkpoint instead.
//
// A resume loads the model's entries into fresh tensors and then into the
// module through LoadStateDict, so the module's load hooks run.
//
// Errors: FailedPrecondition when the probe fails; the module's, a callback's
// or the checkpoint's error otherwise; Unavailable naming the collective when
// a peer dies or times out. All user code -- configure, GetBatch,
// TrainingStep, the optimizer step, every callback, load hooks -- fails
// symmetrically: when it fails (or throws) on one rank, every rank returns
// that rank's error ("<phase> failed on rank R: ..."), agreed in the step's
// allreduces or in an agreement (agreement.h). A failed save leaves the
// previous checkpoint.
#ifndef SHARDLIGHT_LIGHTNING_TRAINER_H_
#define SHARDLIGHT_LIGHTNING_TRAINER_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "lightning/callback.h"
#include "lightning/lightning_module.h"
#include "lightning/model_checkpoint.h"
#include "lightning/phase_times.h"
#include "lightning/run_fingerprint.h"
#include "lightning/strategies/strategy.h"
#include "sharded/checkpoint/async/async_checkpointer.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/process_groups.h"

namespace shardlight::lightning {

// Deterministic data: the same step always gives the same global batch.
class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual Batch GetBatch(int64_t step) const = 0;
  // Steps in one epoch; 0 means no epoch boundary.
  virtual int64_t steps_per_epoch() const { return 0; }
};

// Whether a Fit ending at `max_steps` checkpoints after step `done`: every
// `checkpoint_every` steps (0: never in between) and at the end. The one
// schedule the Trainer follows (fault plans aim at saves by it).
inline bool CheckpointsAfterStep(int64_t done, int64_t max_steps, int64_t checkpoint_every) {
  return done == max_steps || (checkpoint_every > 0 && done % checkpoint_every == 0);
}

struct TrainerOptions {
  int64_t max_steps = 10;
  int64_t max_epochs = 0;  // > 0 caps max_steps at max_epochs * steps_per_epoch
  uint64_t seed = 0;       // passed to ConfigureShardedModel
  std::string checkpoint_dir;    // empty: no checkpoints, no resume
  int64_t checkpoint_every = 0;  // steps between checkpoints; 0: only at the end
  // false: no save after the last step (only every checkpoint_every steps);
  // for a caller that saves at steps of its own choosing in a callback and
  // uses checkpoint_dir for the resume.
  bool save_last = true;
  int keep_last = 0;             // > 0: checkpoint_dir is a root keeping this many steps (see above)
  bool resume = true;            // load checkpoint_dir's checkpoint if it has one
  int64_t log_every = 0;         // > 0: a ProgressCallback on std::cout every this many steps
  std::chrono::milliseconds probe_timeout{std::chrono::seconds(30)};
  // Also where resume reads: save_options.storage (null: POSIX).
  sharded::checkpoint::SaveOptions save_options;
  // What, besides the model's structure and `seed`, makes this run what it
  // is (learning rate, batch size, data): see "Which run" above.
  std::map<std::string, std::string> run_options;
  bool allow_different_run = false;  // resume a checkpoint of another run anyway
  // Asynchronous checkpoints (sharded/checkpoint/async/async_checkpointer.h): a
  // save takes a snapshot of the state into at most async_staging_bytes of
  // host memory per rank and training goes on while the checkpoint is
  // written, on a process group of its own made from `groups`
  // (RankContext::groups, DistributedContext::groups(); required). Same
  // files, roots and retention as a synchronous save. Fit waits for the last
  // save before it returns. The end of a background save is learnt at a
  // step boundary (every rank's save had ended by the step's loss allreduce,
  // which carries the flag), at the next save, or at the end of Fit,
  // whichever comes first: a save that failed then fails Fit on every rank
  // with the failing rank's error; one that committed is reported by
  // OnSaveCheckpoint. OnSaveStarted follows each snapshot.
  // How parameters are laid out and gradients reduced (lightning/strategies/):
  // null is DdpStrategy. May be shared by every rank's options.
  std::shared_ptr<const Strategy> strategy;
  // > 0: after the gradient reduction, scale the gradients so that their
  // global 2-norm over the whole model (every rank's shards) is at most this
  // (lightning/strategies/gradient_clipping.h); 0: no clipping.
  double gradient_clip_norm = 0;
  // > 0: after the gradient reduction, clamp every gradient element to
  // [-gradient_clip_value, gradient_clip_value] (Lightning's
  // gradient_clip_algorithm="value"); 0: none. At most one of the two clips.
  double gradient_clip_value = 0;
  // Micro-batches per optimizer step (Lightning's accumulate_grad_batches;
  // >= 1): step s trains on GetBatch(s * k + i), i < k, and reduces the
  // gradients once (lightning/optimizer_step.h). max_epochs then counts
  // steps_per_epoch / k optimizer steps an epoch.
  int64_t accumulate_grad_batches = 1;
  // > 0 (with a validation source given to Fit): validate every this many
  // optimizer steps (lightning/validation_loop.h). Lightning counts its
  // val_check_interval in batches: ours = Lightning's / accumulate_grad_batches.
  int64_t val_check_interval = 0;
  // Validation batches a run (0: the validation source's steps_per_epoch).
  int64_t limit_val_batches = 0;
  // Lightning's num_sanity_val_steps: validation batches run before the
  // first step to check that every monitored key is logged (-1: all of a
  // run's; 0: none -- a key not logged then fails every rank at the first
  // validation, naming it).
  int64_t num_sanity_val_steps = 2;
  // Lightning's precision: "32-true", "bf16-mixed" or "bf16-true"
  // (lightning/precision.h); another string fails every rank before training.
  std::string precision = "32-true";
  bool async_checkpoint = false;
  int64_t async_staging_bytes = int64_t{256} << 20;
  std::shared_ptr<const sharded::GroupFactory> groups;
  // Not null: this rank's steps' wall time by phase is added to it
  // (lightning/phase_times.h): each step from ZeroGrad to the loss
  // allreduce, the optimizer (clipping, Step, the LR schedule), and the
  // strategy's collectives (FsdpStrategy: all-gathers, reduce-scatters).
  // One per rank, owned by the caller, alive until Fit returns; null: off.
  PhaseTimes* phase_times = nullptr;
};

struct FitResult {
  int64_t start_step = 0;  // where this Fit began (the resumed step)
  int64_t end_step = 0;
  std::vector<double> losses;  // global loss of each step this Fit ran (the mean over its micro-batches)
  std::vector<double> lrs;     // the learning rate each of those steps used
  // Each validation run: the step it followed, and its metrics.
  std::vector<std::pair<int64_t, std::map<std::string, double>>> validations;
  bool stopped_early = false;  // a callback's ShouldStop ended the run at end_step
  int checkpoints_saved = 0;
  std::string resumed_from;  // the checkpoint directory a resume loaded; empty: none
};

class Trainer {
 public:
  explicit Trainer(TrainerOptions options, std::vector<std::shared_ptr<Callback>> callbacks = {});
  absl::StatusOr<FitResult> Fit(LightningModule& module, const DataSource& data,
                                c10::intrusive_ptr<c10d::ProcessGroup> pg);
  // With validation on `val_data` every val_check_interval steps. Before
  // training, InvalidArgument on every rank when val_check_interval <= 0, or
  // no batch count is known (limit_val_batches and steps_per_epoch both 0),
  // or (sanity pass) a callback's monitored key is not logged.
  absl::StatusOr<FitResult> Fit(LightningModule& module, const DataSource& data, const DataSource& val_data,
                                c10::intrusive_ptr<c10d::ProcessGroup> pg);

 private:
  // Loads the newest good step of the root in checkpoint_dir, falling back
  // to older ones; returns the step directory loaded (collective).
  absl::StatusOr<std::string> ResumeFromRoot(LightningModule& module, Optimizer& optimizer, const at::Tensor& step,
                                           c10d::ProcessGroup& pg);
  // The checkpointer of async_checkpoint, on its own group, saving with
  // `save` -- Fit's options, so its checkpoints record the run (collective).
  absl::StatusOr<std::unique_ptr<sharded::checkpoint::AsyncCheckpointer>> StartAsyncCheckpointer(
      c10d::ProcessGroup& pg, const sharded::checkpoint::SaveOptions& save);
  // Loads the committed checkpoint in `dir` (collective).
  // Loads a PyTorch DCP checkpoint in `dir` (see "From PyTorch" above).
  absl::Status ResumeFromDcp(LightningModule& module, Optimizer& optimizer, const at::Tensor& step,
                             c10d::ProcessGroup& pg, const std::string& dir);
  absl::Status Resume(LightningModule& module, Optimizer& optimizer, const at::Tensor& step, c10d::ProcessGroup& pg,
                      const std::string& dir);

  absl::StatusOr<FitResult> FitWith(LightningModule& module, const DataSource& data, const DataSource* val_data,
                                    c10::intrusive_ptr<c10d::ProcessGroup> pg);

  TrainerOptions options_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  RunFingerprint run_;  // this Fit's (set before a resume)
  LrSchedule* lr_schedule_ = nullptr;  // this Fit's, if its module configured one
  StrategyRun* strategy_run_ = nullptr;  // this Fit's: checkpoint views (HSDP) at a resume
  ModelCheckpoint* model_checkpoint_ = nullptr;  // among callbacks_, if one is
};

// The state a checkpoint holds for (module, optimizer, step): the tensors
// share storage with them (saving saves them, loading restores them in
// place); the step ("trainer.step"), the optimizer's hyper-parameters and,
// with an LR schedule, its state ("lr_scheduler.") are values, a snapshot of
// this moment (Trainer::Resume sets them back from a load).
// With a ModelCheckpoint, its ranking under "callbacks.model_checkpoint.".
absl::StatusOr<sharded::StateDict> TrainingStateDict(LightningModule& module, Optimizer& optimizer,
                                                     const at::Tensor& step, LrSchedule* lr_schedule = nullptr,
                                                     ModelCheckpoint* model_checkpoint = nullptr);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_TRAINER_H_
