#include "simulate/lm_scenario.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "simulate/core/simulated_cluster.h"
#include "sharded/status_macros.h"
#include "simulate/lm_run.h"
#include "simulate/training_run.h"

namespace shardlight::simulate {
namespace {

constexpr double kResumeTolerance = 1e-4;  // relative, per step
// Under a bfloat16 param_dtype: each rank's loss is a bfloat16 sum (8-bit
// mantissa, 2^-9 relative per rounding) over its share of the tokens, and a
// resume on another world size splits the tokens, hence the roundings,
// differently: each step may move by a few bf16 steps (2^-8 relative
// apart) and the runs then drift apart. 2e-2 allows that, not a wrong resume.
constexpr double kMixedResumeTolerance = 2e-2;

absl::StatusOr<LmRankResult> RunOnMesh(LmJobOptions job, const std::vector<int64_t>& shape,
                                       const ScenarioOptions& options) {
  job.mesh_shape = shape;
  ClusterOptions cluster_options;
  cluster_options.collective_timeout = options.collective_timeout;
  SimulatedCluster cluster(static_cast<int>(shape[0] * shape[1]), cluster_options);
  auto results = cluster.Run([&](RankContext& ctx) {
    sharded::mesh::MeshContext mesh;
    mesh.store = ctx.store;
    mesh.rank = ctx.rank;
    mesh.world_size = ctx.world_size;
    mesh.world = ctx.pg;
    mesh.timeout = options.collective_timeout;
    return RunLmRank(job, mesh);
  });
  if (!results.ok()) return results.status();
  return (*results)[0];
}

}  // namespace

absl::Status CheckLmScenarioStrategy(const ScenarioOptions& options) {
  const absl::Status checked = CheckLmStrategy(options.strategy, {1, 1});
  if (!checked.ok()) return absl::InvalidArgumentError(absl::StrCat("--strategy: ", checked.message()));
  if (!options.fsdp_per_unit && options.strategy != "fsdp") {
    return absl::InvalidArgumentError(
        absl::StrCat("--fsdp_per_unit applies to --strategy=fsdp; --strategy=", options.strategy, " would ignore it"));
  }
  const absl::Status policy = CheckLmMixedPrecision(options.strategy, options.param_dtype, options.reduce_dtype);
  if (!policy.ok()) return absl::InvalidArgumentError(absl::StrCat("--", policy.message()));
  return absl::OkStatus();
}

absl::Status RunLmScenario(const ScenarioOptions& options, std::ostream& out) {
  if (options.steps < 2) return absl::InvalidArgumentError("the lm scenario needs --steps >= 2 (it resumes halfway)");
  SL_RETURN_IF_ERROR(CheckLmScenarioStrategy(options));
  // model_parallel and fsdp_tp lay the model out on a DP x TP mesh; the others are data parallel only.
  const bool on_mesh = options.strategy == "model_parallel" || options.strategy == "fsdp_tp";
  // The uninterrupted run's mesh, then the meshes that resume it.
  const std::vector<int64_t> first = on_mesh ? std::vector<int64_t>{2, 2} : std::vector<int64_t>{4, 1};
  const std::vector<std::vector<int64_t>> resumes =
      on_mesh ? std::vector<std::vector<int64_t>>{{1, 3}, {4, 1}} : std::vector<std::vector<int64_t>>{{3, 1}, {2, 1}};
  TempDir temp;
  LmJobOptions job;
  job.steps = options.steps;
  job.seed = options.seed;
  job.checkpoint_dir = options.checkpoint_dir.empty() ? temp.path() : options.checkpoint_dir;
  job.save_at = options.steps / 2;
  job.log = &out;
  job.log_every = options.log_every > 0 ? options.log_every : 1;
  job.log_dir = options.log_dir;
  job.progress_bar = options.progress_bar;
  job.strategy = options.strategy;
  job.fsdp_per_unit = options.fsdp_per_unit;
  job.param_dtype = options.param_dtype;
  job.reduce_dtype = options.reduce_dtype;
  const GptOptions& m = job.model;
  out << absl::StrFormat(
      "lm: GPT decoder (%d layers, dim %d, %d heads, MLP %d, context %d, byte vocabulary %d), AdamW lr %g wd %g, "
      "clip %g, global batch %d, corpus %s\n",
      m.layers, m.dim, m.heads, m.mlp_hidden, m.context, m.vocab, job.adam.lr, job.adam.weight_decay, job.clip_norm,
      job.batch, job.corpus);
  if (on_mesh) {
    out << "lm: " << options.strategy << " on a 2x2 mesh (dim 0 data parallel, dim 1 tensor parallel"
        << (options.strategy == "fsdp_tp" ? "; each TP piece of parameters, gradients and AdamW state sharded "
                                            "over the DP ranks, the whole model gathered for each step)"
                                          : ")");
  } else {
    out << "lm: " << options.strategy << " on 4 ranks (data parallel"
        << (options.strategy != "fsdp"  ? ")"
            : options.fsdp_per_unit ? ", parameters, gradients and AdamW state sharded; one unit per block, "
                                      "gathered one at a time)"
                                    : ", parameters, gradients and AdamW state sharded; one unit per block, "
                                      "the whole model gathered for each step)");
  }
  if (!job.param_dtype.empty() || !job.reduce_dtype.empty()) {
    out << ", mixed precision: parameters gathered and computed in "
        << (job.param_dtype.empty() ? "float32" : job.param_dtype) << ", gradients summed in "
        << (job.reduce_dtype.empty() ? "float32" : job.reduce_dtype) << ", AdamW on float32 shards";
  }
  out << ", checkpoint after step " << job.save_at << "\n";
  const std::string first_name = absl::StrJoin(first, "x");
  absl::StatusOr<LmRankResult> full = RunOnMesh(job, first, options);
  if (!full.ok()) return full.status();
  out << absl::StrFormat("lm: %s trained %d steps in %.2f s (%.0f tokens/s), held-out perplexity %.3f\n", first_name,
                         options.steps, full->seconds, full->tokens_per_second, full->eval_perplexity);
  if (!(full->losses.back() < full->losses.front())) {
    return absl::InternalError(absl::StrCat("the loss did not fall: ", full->losses.front(), " -> ", full->losses.back()));
  }
  if (!job.log_dir.empty()) out << "lm: loss, lr, steps/s and tokens/s in " << job.log_dir << " (metrics.csv, TensorBoard)\n";
  job.log = nullptr;
  job.log_dir.clear();  // the resumed runs repeat steps the logs already hold
  const double tolerance = job.param_dtype.empty() ? kResumeTolerance : kMixedResumeTolerance;
  for (const std::vector<int64_t>& shape : resumes) {
    absl::StatusOr<LmRankResult> resumed = RunOnMesh(job, shape, options);
    if (!resumed.ok()) return resumed.status();
    const std::string name = absl::StrJoin(shape, "x");
    if (resumed->start_step != job.save_at) {
      return absl::InternalError(absl::StrCat(name, " resumed at step ", resumed->start_step, ", not ", job.save_at));
    }
    double worst = 0;
    for (size_t i = 0; i < resumed->losses.size(); ++i) {
      const double want = full->losses[job.save_at + i];
      worst = std::max(worst, std::abs(resumed->losses[i] - want) / std::abs(want));
    }
    out << absl::StrFormat("lm: resumed on %s at step %d: losses of steps %d..%d equal the uninterrupted run's "
                           "(largest relative difference %.2e)\n",
                           name, job.save_at, job.save_at + 1, options.steps, worst);
    if (worst > tolerance) {
      return absl::InternalError(absl::StrCat("after resuming on ", name, " the loss differs from the uninterrupted "
                                              "run's by ", worst, " (relative), more than ", tolerance));
    }
  }
  return absl::OkStatus();
}

}  // namespace shardlight::simulate
