// One rank of the main job's training, in this process, under a real
// launcher: torchrun (--no_python), Slurm's srun or Open MPI's mpirun.
//
//   torchrun --standalone --nproc_per_node=4 --no_python --redirects=2 --tee=2
//       --log_dir=/tmp/logs bazel-bin/tools/train/train --steps=10 --checkpoint_dir=/tmp/ckpt
//
// The model, data, Trainer and checkpoints are those of `bazel run
// //simulate:cluster` (simulate/training_run.h: one code path for threads and
// processes), so a job of 4 processes that checkpoints and is resumed by a job
// of 3 ends bit-identical to the simulator's run of the same seed and steps;
// rank 0 prints the final state's digest to compare. Each process prints its
// rank's line; rank 0 prints the job's.
// Exit codes: 0 done, 1 the job failed (the error names the rank), 2 bad
// flags or a bad launcher environment.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lightning/cluster/distributed.h"
#include "lightning/cluster/environment.h"
#include "sharded/mesh/device_mesh.h"
#include "lightning/strategies/fsdp_tp_strategy.h"
#include "simulate/core/fault_plan.h"
#include "flags/directory_flag.h"
#include "flags/strict_flags.h"
#include "simulate/lm_run.h"
#include "simulate/mesh_run.h"
#include "tools/train/die_in.h"
#include "tools/train/lm_job.h"
#include "simulate/training_run.h"

ABSL_FLAG(int, steps, 20, "train until this many steps are done (a resume continues from its checkpoint), >= 1");
ABSL_FLAG(uint64_t, seed, 1234, "seed of the model and the data");
ABSL_FLAG(std::string, checkpoint_dir, "", "checkpoint (and resume) here; empty: no checkpoints");
ABSL_FLAG(int, checkpoint_every, 0, "steps between checkpoints (0: only at the end)");
ABSL_FLAG(int, keep_last, 0,
          "0: --checkpoint_dir holds one checkpoint, replaced by each save; N > 0: it is a checkpoint root of "
          "step-<N>/ checkpoints and a 'latest' pointer, keeping the newest N (a resume falls back past a damaged one)");
ABSL_FLAG(bool, async_checkpoint, false,
          "write checkpoints in the background while training goes on (a snapshot into --staging_mib of host "
          "memory per process, then the usual files and commit on a process group of their own)");
ABSL_FLAG(int, staging_mib, 256, "--async_checkpoint: host memory for a checkpoint's snapshot per process, MiB >= 1");
ABSL_FLAG(int, timeout_ms, 30000, "collective timeout in milliseconds, > 0");
ABSL_FLAG(int, rendezvous_timeout_ms, 300000, "how long to wait for the store and every rank, > 0");
ABSL_FLAG(int, log_every, 0, "rank 0 prints step, loss and steps/s every N steps (0: off)");
ABSL_FLAG(int, min_step_ms, 0, "make each step last at least this long (to watch or interrupt a run)");
ABSL_FLAG(bool, allow_different_run, false,
          "resume the checkpoint in --checkpoint_dir even when another run (seed, model, options) wrote it");
ABSL_FLAG(std::string, fault, "", "inject a fault plan (as //simulate:cluster --fault), e.g. timeout:rank=1,step=3");
ABSL_FLAG(std::string, launcher, "auto", "cluster environment: auto, torchrun, mpi, slurm or single");
ABSL_FLAG(int, rank, -1, "override the environment's rank");
ABSL_FLAG(int, world_size, -1, "override the environment's world size");
ABSL_FLAG(std::string, master_addr, "", "override the store's address");
ABSL_FLAG(int, master_port, 0, "override the store's port");
ABSL_FLAG(std::string, backend, "auto", "gloo, nccl or auto (nccl when --device=cuda)");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda");
ABSL_FLAG(std::string, job, "main",
          "main: the main job (simulate/training_run.h); mesh: the mesh job (simulate/mesh_run.h) on --mesh -- it "
          "loads --checkpoint_dir when a checkpoint is there, else trains --steps and saves there");
ABSL_FLAG(std::string, mesh, "2x2",
          "--job=mesh and --job=lm: the DP x TP device mesh, e.g. 2x2 or 1x3 (its product is the world size); "
          "--strategy=hsdp: replicate x shard");
ABSL_FLAG(std::string, corpus, shardlight::simulate::kDefaultCorpus, "--job=lm: the text file to train on (bytes)");
ABSL_FLAG(int, batch, 8, "--job=lm: global samples per step, >= the DP size");
ABSL_FLAG(int, save_at, -1, "--job=lm: save the checkpoint after this step (0: the initial weights; -1: the end)");
ABSL_FLAG(std::string, save_format, "shardlight",
          "--job=lm: the save at --save_at as shardlight's checkpoint, or torch_dcp: a PyTorch DCP directory under "
          "torch's own names (model., optim.state., optim.param_groups.) for a PyTorch FSDP2 run to load "
          "(--strategy=fsdp or ddp)");
ABSL_FLAG(int, lm_dim, 96, "--job=lm: model width");
ABSL_FLAG(int, lm_heads, 12, "--job=lm: attention heads (the TP size must divide them)");
ABSL_FLAG(int, lm_layers, 2, "--job=lm: decoder blocks");
ABSL_FLAG(int, lm_context, 64, "--job=lm: tokens per sample");
ABSL_FLAG(int, lm_mlp, 384, "--job=lm: MLP hidden size (the TP size must divide it)");
ABSL_FLAG(double, lr, 1e-3, "--job=lm: the optimizer's learning rate");
ABSL_FLAG(std::string, lm_optimizer, "adamw",
          "--job=lm: adamw (torch.optim.AdamW, betas 0.9, 0.95, decoupled weight decay on >= 2-dim tensors) or sgd "
          "(torch.optim.SGD: --lm_momentum, weight decay added to every parameter's gradient), under every strategy");
ABSL_FLAG(std::optional<double>, lm_momentum, std::nullopt,
          "--job=lm --lm_optimizer=sgd: SGD momentum, in [0, 1) (0: plain SGD); default 0.9");
ABSL_FLAG(std::optional<double>, lm_weight_decay, std::nullopt,
          "--job=lm: the optimizer's weight decay, >= 0; default 0.1 with adamw (decoupled, >= 2-dim tensors), 0 with "
          "sgd (torch.optim.SGD's: added to every parameter's gradient)");
ABSL_FLAG(std::string, lm_dtype, "float32",
          "--job=lm: float32 or float64 (parameters, activations, optimizer state)");
ABSL_FLAG(bool, lm_deferred_init, false,
          "--job=lm: build the dense model (fsdp, hsdp, ddp) without storage; fsdp/hsdp fill each rank's chunk only "
          "(GptOptions::deferred_init: no rank holds the whole model). The same values");
ABSL_FLAG(std::string, lm_grads_dir, "", "--job=lm: save the gradients of the first --lm_grads_steps steps here");
ABSL_FLAG(int, lm_grads_steps, 0, "--job=lm: steps whose gradients go to --lm_grads_dir/step<K> (checkpoints)");
ABSL_FLAG(std::string, strategy, "model_parallel",
          "--job=lm: the Trainer's strategy -- model_parallel (DP x TP on --mesh), fsdp_tp (DP x TP on --mesh with "
          "each TP piece sharded again over DP: FSDP x TP), fsdp (fully sharded, one unit per block), ddp, or hsdp (fsdp sharded over S and replicated over R on --mesh=RxS: replicate x shard); fsdp "
          "and ddp are data parallel only (--mesh=Nx1)");
ABSL_FLAG(bool, fsdp_per_unit, true,
          "--job=lm --strategy=fsdp: gather one block at a time inside the step (fully_shard's default: at most "
          "the root and two blocks unsharded per rank); false: the whole model for the step");
ABSL_FLAG(std::string, param_dtype, "",
          "--job=lm --strategy=fsdp: FSDP2's MixedPrecisionPolicy param_dtype -- gather, forward and backward in "
          "this dtype (bf16, fp32, ...; torch's names too) while AdamW steps the --lm_dtype shards; empty: --lm_dtype");
ABSL_FLAG(std::string, reduce_dtype, "",
          "--job=lm --strategy=fsdp: sum the gradients in this dtype (fp32, bf16, ...); empty: --lm_dtype");
ABSL_FLAG(std::string, die_in, "",
          "--job=lm --strategy=fsdp (per-unit) or fsdp_tp, a fault for tests: the named rank kills itself (SIGKILL) "
          "as it enters one unit collective -- all-gather:rank=R,step=K,unit=U[,n=N] (N: 1 the forward's, 2 the "
          "backward's) or reduce-scatter:rank=R,step=K,unit=U (K from 0, as errors name steps; U: block0, block1, "
          "... under fsdp, model under fsdp_tp, which gathers the whole model once per step)");
ABSL_FLAG(bool, fsdp_prefetch, true,
          "--job=lm --strategy=fsdp or hsdp (per unit): issue the next unit's all-gather before waiting for the "
          "current one (FsdpOptions::prefetch); false: each all-gather where it is waited for");
ABSL_FLAG(bool, fsdp_buffer_pool, true,
          "--job=lm --strategy=fsdp, hsdp or fsdp_tp: transient buffers from a pool of mapped blocks reused across "
          "units and steps (FsdpOptions::buffer_pool); false: malloc");
ABSL_FLAG(bool, phase_times, false,
          "--job=lm: each rank also prints its seconds per step by phase (\"train: rank R/W phase_times steps N "
          "step_s S all_gather_s A compute_s C reduce_scatter_s R optimizer_s O\"; lightning/phase_times.h)");
ABSL_FLAG(int, threads, 0, "intra-op threads per process (0: LibTorch's default)");

namespace shardlight::tools {
namespace {

// A rank's error as one line written at once: std::cerr writes each << on its
// own, and under mpirun the pieces of several ranks' lines interleave.
void ReportRankError(int rank, const absl::Status& status) {
  std::cerr << absl::StrCat("train: rank ", rank, ": ", status.ToString(), "\n") << std::flush;
}

// How long a rank keeps running after SIGTERM (ExitOnSigtermAfterGrace): its
// collectives fail within the collective timeout once a peer is gone.
std::chrono::milliseconds SigtermGrace() {
  return std::chrono::milliseconds(absl::GetFlag(FLAGS_timeout_ms)) + std::chrono::seconds(2);
}

using lightning::cluster::PlacementOverrides;

int BadUsage(const std::string& message) {
  std::cerr << "train: " << message << "\n";
  return 2;
}

// The mesh job on this process's rank; its DeviceMesh's sub-groups come from
// the job's store, as the simulator's come from its HashStore.
int RunMeshRank(const simulate::MeshJobOptions& job, const lightning::cluster::ProcessPlacement& placement,
               lightning::cluster::DistributedContext& ctx, std::chrono::milliseconds timeout) {
  auto result = simulate::RunMeshJob(job, MeshContextOf(placement, ctx, timeout));
  if (!result.ok()) {
    ReportRankError(placement.rank, result.status());
    (void)ctx.Leave(std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(10)));
    return 1;
  }
  std::ostringstream line;
  line << std::fixed << std::setprecision(6) << "train: rank " << placement.rank << "/" << placement.world_size
       << " mesh " << absl::StrJoin(job.mesh_shape, "x") << " " << (result->loaded ? "loaded" : "trained")
       << " steps " << result->losses.size();
  if (!result->losses.empty()) line << " last_loss " << result->losses.back();
  std::cout << line.str() << "\n" << std::flush;
  if (auto left = ctx.Leave(); !left.ok()) {
    ReportRankError(placement.rank, left);
    return 1;
  }
  if (placement.rank == 0) {
    std::cout << "train: mesh job of " << placement.world_size << " processes on a "
              << absl::StrJoin(job.mesh_shape, "x") << " mesh: "
              << (result->loaded ? "loaded model digest " : "saved model digest ") << result->digest << "\n"
              << std::flush;
  }
  return 0;
}

// --lm_optimizer, --lr, --lm_momentum, --lm_weight_decay into `job`; an error naming the flag.
absl::Status LmOptimizerOf(simulate::LmJobOptions& job) {
  job.optimizer = absl::GetFlag(FLAGS_lm_optimizer);
  const double lr = absl::GetFlag(FLAGS_lr);
  const std::optional<double> momentum = absl::GetFlag(FLAGS_lm_momentum);
  const std::optional<double> weight_decay = absl::GetFlag(FLAGS_lm_weight_decay);
  if (auto known = simulate::CheckLmOptimizer(job.optimizer, {}); !known.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--lm_optimizer: ", known.message()));
  }
  if (!(lr > 0)) return absl::InvalidArgumentError(absl::StrCat("--lr=", lr, " must be > 0"));
  if (weight_decay.has_value() && !(*weight_decay >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("--lm_weight_decay=", *weight_decay, " must be >= 0"));
  }
  if (job.optimizer == "adamw") {
    if (momentum.has_value()) {
      return absl::InvalidArgumentError("--lm_momentum applies to --lm_optimizer=sgd; adamw would ignore it");
    }
    job.adam.lr = lr;
    job.adam.weight_decay = weight_decay.value_or(job.adam.weight_decay);
    return absl::OkStatus();
  }
  if (momentum.has_value() && !(*momentum >= 0 && *momentum < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("--lm_momentum=", *momentum, " must be in [0, 1)"));
  }
  job.sgd = {lr, momentum.value_or(0.9), weight_decay.value_or(0.0)};
  return absl::OkStatus();
}

int Main() {
  if (absl::GetFlag(FLAGS_threads) > 0) at::set_num_threads(absl::GetFlag(FLAGS_threads));
  simulate::TrainingRunOptions run;
  const int steps = absl::GetFlag(FLAGS_steps);
  if (steps < 1) return BadUsage(absl::StrCat("--steps=", steps, " must be >= 1"));
  run.max_steps = steps;
  run.seed = absl::GetFlag(FLAGS_seed);
  run.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  run.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  run.keep_last = absl::GetFlag(FLAGS_keep_last);
  run.log_every = absl::GetFlag(FLAGS_log_every);
  run.allow_different_run = absl::GetFlag(FLAGS_allow_different_run);
  run.async_checkpoint = absl::GetFlag(FLAGS_async_checkpoint);
  run.async_staging_bytes = int64_t{absl::GetFlag(FLAGS_staging_mib)} << 20;
  if (absl::GetFlag(FLAGS_staging_mib) < 1) return BadUsage("--staging_mib must be >= 1");
  if (run.async_checkpoint && run.checkpoint_dir.empty()) return BadUsage("--async_checkpoint needs --checkpoint_dir");
  run.min_step_time = std::chrono::milliseconds(absl::GetFlag(FLAGS_min_step_ms));
  run.collective_timeout = std::chrono::milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  if (run.checkpoint_every < 0) return BadUsage("--checkpoint_every must be >= 0");
  if (run.keep_last < 0) return BadUsage(absl::StrCat("--keep_last=", run.keep_last, " must be >= 0"));
  if (run.keep_last > 0 && run.checkpoint_dir.empty()) return BadUsage("--keep_last needs --checkpoint_dir");
  if (run.log_every < 0) return BadUsage("--log_every must be >= 0");
  if (run.min_step_time.count() < 0) return BadUsage("--min_step_ms must be >= 0");
  if (run.collective_timeout.count() <= 0) return BadUsage("--timeout_ms must be > 0");
  if (run.checkpoint_every > 0 && run.checkpoint_dir.empty()) {
    return BadUsage("--checkpoint_every needs --checkpoint_dir");
  }

  const std::string job = absl::GetFlag(FLAGS_job);
  if (job != "main" && job != "mesh" && job != "lm") {
    return BadUsage(absl::StrCat("--job=", job, " is not main, mesh or lm"));
  }
  if (absl::GetFlag(FLAGS_threads) < 0) return BadUsage("--threads must be >= 0");
  if (job != "lm" && absl::GetFlag(FLAGS_strategy) != "model_parallel") {
    return BadUsage("--strategy applies to --job=lm; --job=" + job + " would ignore it");
  }
  if (job != "lm" && !absl::GetFlag(FLAGS_fsdp_prefetch)) {
    return BadUsage("--fsdp_prefetch applies to --job=lm; --job=" + job + " would ignore it");
  }
  if (job != "lm" && !absl::GetFlag(FLAGS_fsdp_buffer_pool)) {
    return BadUsage("--fsdp_buffer_pool applies to --job=lm; --job=" + job + " would ignore it");
  }
  if (job != "lm" && absl::GetFlag(FLAGS_phase_times)) {
    return BadUsage("--phase_times applies to --job=lm; --job=" + job + " would ignore it");
  }
  if (job != "lm" && !absl::GetFlag(FLAGS_fsdp_per_unit)) {
    return BadUsage("--fsdp_per_unit applies to --job=lm --strategy=fsdp; --job=" + job + " would ignore it");
  }
  if (job != "lm" && (absl::GetFlag(FLAGS_lm_optimizer) != "adamw" || absl::GetFlag(FLAGS_lm_momentum).has_value() ||
                      absl::GetFlag(FLAGS_lm_weight_decay).has_value())) {
    return BadUsage("--lm_optimizer, --lm_momentum and --lm_weight_decay apply to --job=lm; --job=" + job +
                    " would ignore them");
  }
  if (job != "lm" && (!absl::GetFlag(FLAGS_param_dtype).empty() || !absl::GetFlag(FLAGS_reduce_dtype).empty())) {
    return BadUsage("--param_dtype and --reduce_dtype apply to --job=lm --strategy=fsdp; --job=" + job +
                    " would ignore them");
  }
  simulate::LmJobOptions lm_job;
  lightning::PhaseTimes phase_times;  // this process's rank's, with --phase_times
  if (job == "lm") {
    if (absl::GetFlag(FLAGS_phase_times)) lm_job.phase_times = &phase_times;
    auto shape = sharded::mesh::ParseMeshShape(absl::GetFlag(FLAGS_mesh));
    if (!shape.ok()) return BadUsage(absl::StrCat("--mesh: ", shape.status().message()));
    if (shape->size() != 2) return BadUsage(absl::StrCat("--mesh=", absl::GetFlag(FLAGS_mesh), " must be DPxTP (2-d)"));
    if (absl::GetFlag(FLAGS_device) != "cpu") return BadUsage("--job=lm runs on --device=cpu only");
    if (!absl::GetFlag(FLAGS_fault).empty() || run.async_checkpoint) {
      return BadUsage("--job=lm takes no --fault or --async_checkpoint");
    }
    lm_job.checkpoint_every = run.checkpoint_every;
    lm_job.keep_last = run.keep_last;
    lm_job.mesh_shape = *shape;
    lm_job.strategy = absl::GetFlag(FLAGS_strategy);
    if (auto checked = simulate::CheckLmStrategy(lm_job.strategy, lm_job.mesh_shape); !checked.ok()) {
      return BadUsage(absl::StrCat("--strategy: ", checked.message(), " (--mesh=", absl::GetFlag(FLAGS_mesh), ")"));
    }
    lm_job.fsdp_per_unit = absl::GetFlag(FLAGS_fsdp_per_unit);
    lm_job.fsdp_prefetch = absl::GetFlag(FLAGS_fsdp_prefetch);
    if (!lm_job.fsdp_prefetch && (!lm_job.fsdp_per_unit || (lm_job.strategy != "fsdp" && lm_job.strategy != "hsdp"))) {
      return BadUsage("--fsdp_prefetch=false applies to --strategy=fsdp or hsdp with --fsdp_per_unit");
    }
    lm_job.fsdp_buffer_pool = absl::GetFlag(FLAGS_fsdp_buffer_pool);
    if (!lm_job.fsdp_buffer_pool && lm_job.strategy != "fsdp" && lm_job.strategy != "hsdp" &&
        lm_job.strategy != "fsdp_tp") {
      return BadUsage("--fsdp_buffer_pool=false applies to --strategy=fsdp, hsdp or fsdp_tp");
    }
    lm_job.param_dtype = absl::GetFlag(FLAGS_param_dtype);
    lm_job.reduce_dtype = absl::GetFlag(FLAGS_reduce_dtype);
    if (auto checked = simulate::CheckLmMixedPrecision(lm_job.strategy, lm_job.param_dtype, lm_job.reduce_dtype);
        !checked.ok()) {
      return BadUsage(absl::StrCat("--", checked.message()));
    }
    if (absl::GetFlag(FLAGS_lm_deferred_init) && (lm_job.strategy == "model_parallel" || lm_job.strategy == "fsdp_tp")) {
      return BadUsage("--lm_deferred_init applies to the dense build (--strategy=fsdp, hsdp or ddp); --strategy=" +
                      lm_job.strategy + " builds each rank's slices and would ignore it");
    }
    if (!lm_job.fsdp_per_unit && lm_job.strategy != "fsdp" && lm_job.strategy != "hsdp") {
      return BadUsage("--fsdp_per_unit applies to --strategy=fsdp or hsdp; --strategy=" + lm_job.strategy +
                      " would ignore it");
    }
    lm_job.steps = steps;
    lm_job.seed = run.seed;
    lm_job.checkpoint_dir = run.checkpoint_dir;
    lm_job.corpus = absl::GetFlag(FLAGS_corpus);
    lm_job.batch = absl::GetFlag(FLAGS_batch);
    lm_job.save_at = absl::GetFlag(FLAGS_save_at);
    lm_job.save_format = absl::GetFlag(FLAGS_save_format);
    lm_job.model.dim = absl::GetFlag(FLAGS_lm_dim);
    lm_job.model.heads = absl::GetFlag(FLAGS_lm_heads);
    lm_job.model.layers = absl::GetFlag(FLAGS_lm_layers);
    lm_job.model.context = absl::GetFlag(FLAGS_lm_context);
    lm_job.model.mlp_hidden = absl::GetFlag(FLAGS_lm_mlp);
    lm_job.model.deferred_init = absl::GetFlag(FLAGS_lm_deferred_init);
    if (auto optimizer = LmOptimizerOf(lm_job); !optimizer.ok()) return BadUsage(std::string(optimizer.message()));
    lm_job.log_every = run.log_every;
    const std::string dtype = absl::GetFlag(FLAGS_lm_dtype);
    if (dtype != "float32" && dtype != "float64") return BadUsage("--lm_dtype must be float32 or float64, not " + dtype);
    lm_job.model.dtype = dtype == "float64" ? at::kDouble : at::kFloat;
    lm_job.grads_dir = absl::GetFlag(FLAGS_lm_grads_dir);
    lm_job.grads_steps = absl::GetFlag(FLAGS_lm_grads_steps);
    if (lm_job.grads_steps < 0) return BadUsage("--lm_grads_steps must be >= 0");
    if (lm_job.grads_steps > 0 && lm_job.grads_dir.empty()) return BadUsage("--lm_grads_steps needs --lm_grads_dir");
    if (lm_job.save_format == "torch_dcp" && lm_job.optimizer != "adamw") {
      return BadUsage("--save_format=torch_dcp writes torch.optim.AdamW's state under torch's names; --lm_optimizer=" +
                      lm_job.optimizer + " has none");
    }
    if (lm_job.save_at < -1) return BadUsage("--save_at must be >= -1");
    if (lm_job.save_at >= 0 && run.checkpoint_dir.empty()) return BadUsage("--save_at needs --checkpoint_dir");
    if (lm_job.save_at >= 0 && run.keep_last > 0) {
      return BadUsage("--save_at saves a plain checkpoint, which --keep_last's checkpoint root cannot hold");
    }
  }
  simulate::MeshJobOptions mesh_job;
  if (job == "mesh") {
    auto shape = sharded::mesh::ParseMeshShape(absl::GetFlag(FLAGS_mesh));
    if (!shape.ok()) return BadUsage(absl::StrCat("--mesh: ", shape.status().message()));
    if (shape->size() != 2) return BadUsage(absl::StrCat("--mesh=", absl::GetFlag(FLAGS_mesh), " must be DPxTP (2-d)"));
    if (absl::GetFlag(FLAGS_device) != "cpu") return BadUsage("--job=mesh runs on --device=cpu only");
    if (!absl::GetFlag(FLAGS_fault).empty() || run.checkpoint_every > 0 || run.keep_last > 0 || run.async_checkpoint) {
      return BadUsage("--job=mesh takes no --fault, --checkpoint_every, --keep_last or --async_checkpoint");
    }
    mesh_job.mesh_shape = *shape;
    mesh_job.steps = steps;
    mesh_job.seed = run.seed;
    mesh_job.checkpoint_dir = run.checkpoint_dir;
  }

  PlacementOverrides overrides;
  overrides.launcher = absl::GetFlag(FLAGS_launcher);
  if (absl::GetFlag(FLAGS_rank) >= 0) overrides.rank = absl::GetFlag(FLAGS_rank);
  if (absl::GetFlag(FLAGS_world_size) >= 0) overrides.world_size = absl::GetFlag(FLAGS_world_size);
  if (!absl::GetFlag(FLAGS_master_addr).empty()) overrides.master_addr = absl::GetFlag(FLAGS_master_addr);
  if (absl::GetFlag(FLAGS_master_port) != 0) overrides.master_port = absl::GetFlag(FLAGS_master_port);
  auto placement = lightning::cluster::DetectEnvironment(lightning::cluster::ProcessEnvironment(), overrides);
  if (!placement.ok()) return BadUsage(std::string(placement.status().message()));
  if (job == "mesh" || job == "lm") {
    const auto& shape = job == "mesh" ? mesh_job.mesh_shape : lm_job.mesh_shape;
    if (auto fits = sharded::mesh::ValidateMeshShape(shape, placement->world_size); !fits.ok()) {
      return BadUsage(absl::StrCat("--mesh: ", fits.message()));
    }
  }

  if (const std::string fault = absl::GetFlag(FLAGS_fault); !fault.empty()) {
    auto plan = simulate::ParseFaultPlan(fault);
    if (!plan.ok()) return BadUsage(absl::StrCat("--fault: ", plan.status().message()));
    if (plan->rank >= placement->world_size) {
      return BadUsage(absl::StrCat("--fault names rank ", plan->rank, " of a ", placement->world_size, "-rank job"));
    }
    if (plan->step > steps) return BadUsage(absl::StrCat("--fault step ", plan->step, " is after --steps=", steps));
    run.fault = *plan;
  }
  if (const std::string die_in = absl::GetFlag(FLAGS_die_in); !die_in.empty()) {
    auto die = ParseDieIn(die_in);
    if (!die.ok()) return BadUsage(absl::StrCat("--die_in: ", die.status().message()));
    const bool fsdp_tp = job == "lm" && lm_job.strategy == "fsdp_tp";
    if (!fsdp_tp && (job != "lm" || lm_job.strategy != "fsdp" || !lm_job.fsdp_per_unit)) {
      return BadUsage(
          "--die_in applies to --job=lm --strategy=fsdp with --fsdp_per_unit, or --strategy=fsdp_tp (their unit "
          "collectives)");
    }
    if (die->rank >= placement->world_size) {
      return BadUsage(absl::StrCat("--die_in names rank ", die->rank, " of a ", placement->world_size, "-rank job"));
    }
    if (die->step >= steps) {
      return BadUsage(absl::StrCat("--die_in step ", die->step, " (from 0) is not before --steps=", steps));
    }
    const std::vector<std::string> units = fsdp_tp ? std::vector<std::string>{lightning::FsdpTpStrategy::kUnit}
                                                   : simulate::GptModel::FsdpUnits(lm_job.model);
    if (std::find(units.begin(), units.end(), die->unit) == units.end()) {
      return BadUsage(absl::StrCat("--die_in names the unit '", die->unit, "', not one of ", absl::StrJoin(units, ", ")));
    }
    if (fsdp_tp && die->n != 1) {
      return BadUsage(absl::StrCat("--die_in: fsdp_tp gathers its unit '", die->unit, "' once per step (n=1), not ",
                                   die->n, " times"));
    }
    lm_job.fsdp_on_unit_collective = DieInHook(*die, placement->rank);
  }

  lightning::cluster::DistributedOptions dist;
  dist.collective_timeout = run.collective_timeout;
  dist.rendezvous_timeout = std::chrono::milliseconds(absl::GetFlag(FLAGS_rendezvous_timeout_ms));
  if (dist.rendezvous_timeout.count() <= 0) return BadUsage("--rendezvous_timeout_ms must be > 0");
  dist.backend = absl::GetFlag(FLAGS_backend);
  dist.device = absl::GetFlag(FLAGS_device);
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr) dist.gloo_interface = ifname;

  // Last of the flag checks: it creates the directory.
  if (!run.checkpoint_dir.empty()) {
    const std::string error = flags::PrepareWritableDirectory("checkpoint_dir", run.checkpoint_dir);
    if (!error.empty()) return BadUsage(error);
  }

  const int rank = placement->rank;
  std::cout << "train: " << lightning::cluster::Describe(*placement) << "\n" << std::flush;
  if (auto warning = lightning::cluster::ShortKillGraceWarning(*placement, lightning::cluster::ProcessEnvironment(),
                                                               SigtermGrace());
      warning && placement->rank == 0) {
    std::cerr << "train: warning: " << *warning << "\n" << std::flush;
  }
  auto ctx = lightning::cluster::InitDistributed(*placement, dist);
  if (!ctx.ok()) {
    ReportRankError(rank, ctx.status());
    return 1;
  }
  if (job == "mesh") return RunMeshRank(mesh_job, *placement, **ctx, run.collective_timeout);
  if (job == "lm") return RunLmJobRank(lm_job, *placement, **ctx, run.collective_timeout);
  run.groups = (*ctx)->groups();
  auto result = simulate::TrainRank(run, (*ctx)->pg());
  if (!result.ok()) {
    ReportRankError(rank, result.status());
    // Rank 0 serves the store: it stays (bounded) until its peers have named
    // the failing rank from it too.
    (void)(*ctx)->Leave(std::min<std::chrono::milliseconds>(run.collective_timeout, std::chrono::seconds(10)));
    return 1;
  }
  const simulate::RankSummary& s = result->summary;
  std::ostringstream line;
  line << std::fixed << std::setprecision(6) << "train: rank " << rank << "/" << placement->world_size << " table_rows "
       << s.table_rows << " steps " << s.start_step << "->" << s.end_step << " first_loss " << s.first_loss
       << " last_loss " << s.last_loss << " checkpoints " << s.checkpoints_saved << std::setprecision(2) << " seconds "
       << s.seconds << "\n";
  std::cout << line.str() << std::flush;
  if (auto left = (*ctx)->Leave(); !left.ok()) {
    ReportRankError(rank, left);
    return 1;
  }
  if (rank == 0 && s.start_step >= steps) {
    std::cout << "train: nothing to do: the checkpoint in " << run.checkpoint_dir << " is at step " << s.start_step
              << " and --steps=" << steps << " (raise --steps to train further)\n"
              << std::flush;
    return 0;
  }
  if (rank == 0) {
    std::cout << "train: job of " << placement->world_size << " processes (" << placement->launcher << ", "
              << (*ctx)->backend() << ") trained steps " << s.start_step << "->" << s.end_step << ", final loss "
              << std::fixed << std::setprecision(6) << s.last_loss << "\n";
    if (result->loaded_state) {
      std::cout << "train: resumed from step " << s.start_step << ", loaded state digest "
                << result->loaded_state->Digest() << "\n";
    }
    std::cout << "train: final state digest " << result->final_state.Digest() << "\n" << std::flush;
  }
  return 0;
}

}  // namespace
}  // namespace shardlight::tools

namespace shardlight::tools {
namespace {

// A launcher that sees one worker die stops the others with SIGTERM, often
// before they have noticed the loss themselves. A rank that gets SIGTERM
// keeps running for a bounded grace period -- its collectives fail within the
// collective timeout once a peer is gone, and it then reports which rank was
// lost -- and exits 143 if it is still running after that.
void ExitOnSigtermAfterGrace(const sigset_t& terminate) {
  std::thread([terminate] {
    int signal_number = 0;
    if (sigwait(&terminate, &signal_number) != 0) return;
    const auto grace = SigtermGrace();
    std::cerr << "train: received SIGTERM; exiting within " << grace.count()
              << " ms, after this rank's error (if any) is reported\n"
              << std::flush;
    std::this_thread::sleep_for(grace);
    std::_Exit(128 + SIGTERM);
  }).detach();
}

}  // namespace
}  // namespace shardlight::tools

int main(int argc, char** argv) {
  // Before any thread exists, so every thread inherits the mask and only the
  // grace thread receives SIGTERM.
  sigset_t terminate;
  sigemptyset(&terminate);
  sigaddset(&terminate, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &terminate, nullptr);
  absl::SetProgramUsageMessage(
      "Runs one rank of the main job's training under torchrun, srun or mpirun.\n"
      "  torchrun --standalone --nproc_per_node=4 --no_python bazel-bin/tools/train/train --steps=10 "
      "--checkpoint_dir=DIR");
  shardlight::tools::flags::ParseOnlyFlagsOrExit(argc, argv);
  // Gloo writes to peers that may have died; that must fail the write, not
  // kill this process.
  signal(SIGPIPE, SIG_IGN);
  shardlight::tools::ExitOnSigtermAfterGrace(terminate);
  return shardlight::tools::Main();
}
