#include "simulate/lm_run.h"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "lightning/metrics/perplexity.h"
#include "lightning/state_dict_hooks.h"
#include "lightning/tp/mesh_gradients.h"
#include "lightning/tp/tp_collectives.h"
#include "sharded/agreement.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/interop/dcp/dcp_checkpoint.h"
#include "sharded/checkpoint/storage/storage.h"
#include "sharded/mesh/mesh_checkpoint.h"
#include "sharded/no_throw.h"
#include "sharded/sharding_spec.h"
#include "sharded/stable_hash.h"
#include "sharded/status_macros.h"

namespace shardlight::simulate {
namespace {

namespace tp = lightning::tp;
using sharded::mesh::MeshPtr;

// The model's, the optimizer's and the step's entries of a checkpoint.
absl::StatusOr<sharded::StateDict> SaveDict(GptModel& model, tp::MeshAdamW& adam, const at::Tensor& step) {
  SL_ASSIGN_OR_RETURN(sharded::StateDict m, lightning::StateDictOf(model));
  sharded::StateDict dict;
  for (const auto& [key, value] : m.entries()) SL_RETURN_IF_ERROR(dict.Insert("model." + key, value));
  SL_RETURN_IF_ERROR(adam.AddStateTo(dict, "optimizer.", /*for_load=*/false));
  SL_RETURN_IF_ERROR(dict.Insert("trainer.step", step));
  return dict;
}

// Loads `dir` into model, optimizer and step (collective), as the Trainer
// resumes: fresh tensors of the model's layout reach it through its load hooks.
// A DCP directory loads the same way (LoadCheckpoint reads its .metadata):
// strict, so it must hold exactly these keys, and every rank gets the error
// naming the missing and the unexpected ones.
absl::Status Resume(GptModel& model, tp::MeshAdamW& adam, at::Tensor& step, const std::string& dir,
                    c10d::ProcessGroup& world) {
  SL_ASSIGN_OR_RETURN(sharded::StateDict current, lightning::StateDictOf(model));
  sharded::StateDict fresh, target;
  for (const auto& [key, value] : current.entries()) {
    sharded::ShardedTensor t = std::get<sharded::ShardedTensor>(value).ZerosLike(false);
    SL_RETURN_IF_ERROR(fresh.Insert(key, t));
    SL_RETURN_IF_ERROR(target.Insert("model." + key, t));
  }
  SL_RETURN_IF_ERROR(adam.AddStateTo(target, "optimizer.", /*for_load=*/true));
  SL_RETURN_IF_ERROR(target.Insert("trainer.step", step));
  sharded::checkpoint::LoadOptions load;
  load.verify_before_write = true;
  SL_RETURN_IF_ERROR(sharded::checkpoint::LoadCheckpoint(target, dir, world, load));
  SL_RETURN_IF_ERROR(lightning::LoadStateDict(model, std::move(fresh), /*strict=*/true).status());
  return adam.CompleteLoad();
}

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

}  // namespace

absl::StatusOr<LmRankResult> RunLmRank(const LmJobOptions& o, const sharded::mesh::MeshContext& ctx) {
  c10d::ProcessGroup& world = *ctx.world;
  // Setup checks, agreed: each rank's error is every rank's, before any mesh work.
  absl::StatusOr<ByteCorpus> corpus = ByteCorpus::Load(o.corpus, o.model.context);
  absl::Status setup = corpus.status();
  if (setup.ok() && o.mesh_shape.size() != 2) {
    setup = absl::InvalidArgumentError(absl::StrCat("the LM job needs a 2-d mesh (data parallel x tensor parallel), not ",
                                                    absl::StrJoin(o.mesh_shape, "x")));
  }
  if (setup.ok()) setup = sharded::mesh::ValidateMeshShape(o.mesh_shape, ctx.world_size);
  if (setup.ok()) setup = CheckGptOptions(o.model, o.mesh_shape[1]);
  if (setup.ok() && o.batch < o.mesh_shape[0]) {
    setup = absl::InvalidArgumentError(
        absl::StrCat("a global batch of ", o.batch, " cannot be split over ", o.mesh_shape[0], " data-parallel ranks"));
  }
  if (setup.ok() && o.grads_steps > 0 && o.grads_dir.empty()) {
    setup = absl::InvalidArgumentError("saving the gradients of the first steps needs a directory (grads_dir)");
  }
  SL_RETURN_IF_ERROR(sharded::Agree(world, setup, "LM job setup"));

  SL_ASSIGN_OR_RETURN(MeshPtr mesh, sharded::mesh::DeviceMesh::Create(ctx, o.mesh_shape, "lm"));
  SL_ASSIGN_OR_RETURN(tp::TpMesh tpm, tp::TpMesh::Of(mesh, 1));
  auto model = std::make_shared<GptModel>(o.model, tpm);
  SL_RETURN_IF_ERROR(model->ConfigureShardedModel({ctx.world, ctx.rank, ctx.world_size, o.seed}));
  tp::MeshParams params;
  for (auto& [key, m] : lightning::MeshMembers(*model, "")) params.emplace_back(key, m);
  SL_ASSIGN_OR_RETURN(std::unique_ptr<tp::MeshAdamW> adam, tp::MeshAdamW::Create(params, o.adam));

  LmRankResult result;
  at::Tensor step = at::zeros({1}, at::kLong);
  const bool checkpoints = !o.checkpoint_dir.empty();
  // Our own checkpoint first; else a PyTorch DCP one (its .metadata) under our keys.
  const bool own = checkpoints && o.resume && sharded::checkpoint::HasCommittedCheckpoint(o.checkpoint_dir);
  result.resumed_from_dcp = checkpoints && o.resume && !own &&
                            sharded::checkpoint::dcp::IsDcpCheckpoint(o.checkpoint_dir, sharded::checkpoint::PosixStorage());
  const bool found = own || result.resumed_from_dcp;
  SL_RETURN_IF_ERROR(sharded::AgreeOn(world, sharded::StableHash(own ? "own" : found ? "dcp" : "none"),
                                      {absl::StrCat("LM checkpoint lookup in ", o.checkpoint_dir),
                                       "which committed checkpoint is there (shardlight's, PyTorch DCP or none)"}));
  if (found) {
    SL_RETURN_IF_ERROR(Resume(*model, *adam, step, o.checkpoint_dir, world));
    result.start_step = step[0].item<int64_t>();
    if (o.log != nullptr && ctx.rank == 0) {
      *o.log << absl::StrFormat("lm: resumed at step %d from the %s checkpoint in %s\n", result.start_step,
                                own ? "shardlight" : "PyTorch DCP", o.checkpoint_dir)
             << std::flush;
    }
  }
  auto save = [&](int64_t done) -> absl::Status {
    step.fill_(done);
    SL_ASSIGN_OR_RETURN(sharded::StateDict dict, SaveDict(*model, *adam, step));
    return sharded::checkpoint::SaveCheckpoint(dict, o.checkpoint_dir, world);
  };
  if (checkpoints && o.save_at == result.start_step && !found) SL_RETURN_IF_ERROR(save(result.start_step));

  const int64_t dp = o.mesh_shape[0], dp_rank = mesh->coords()[0];
  const auto [mine_first, mine_count] = sharded::ChunkRanges(o.batch, dp)[dp_rank];
  const double global_tokens = static_cast<double>(o.batch * o.model.context);
  c10d::ProcessGroup& dp_group = *mesh->group(0);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t s = result.start_step; s < o.steps; ++s) {
    adam->ZeroGrad();
    at::Tensor loss;
    const absl::Status stepped = sharded::NoThrow([&]() -> absl::Status {
      const auto [ids, targets] = corpus->Samples(o.data_seed, s * o.batch + mine_first, mine_count);
      loss = model->TokenLosses(ids, targets).sum() / global_tokens;
      loss.backward();
      SL_RETURN_IF_ERROR(tp::AllreduceDataParallelGrads(tpm, params));
      if (s - result.start_step < o.grads_steps) {
        SL_RETURN_IF_ERROR(SaveGrads(params, absl::StrCat(o.grads_dir, "/step", s + 1), world));
      }
      SL_RETURN_IF_ERROR(tp::ClipGradNorm(tpm, params, o.clip_norm).status());
      adam->Step();
      return absl::OkStatus();
    });
    SL_RETURN_IF_ERROR(sharded::Agree(world, stepped, absl::StrCat("LM training step ", s)));
    at::Tensor global = loss.detach().to(at::kDouble).reshape({1}).contiguous();
    SL_RETURN_IF_ERROR(sharded::NoThrow([&] {
      tp::AllreduceInPlace(global, dp_group);
      return absl::OkStatus();
    }));
    result.losses.push_back(global.item<double>());
    const int64_t done = s + 1;
    if (o.log != nullptr && ctx.rank == 0 && o.log_every > 0 && (done % o.log_every == 0 || done == o.steps)) {
      *o.log << absl::StrFormat("lm: step %d loss %.9f perplexity %.3f\n", done, result.losses.back(),
                                std::exp(result.losses.back()))
             << std::flush;  // whole lines: other ranks share the stream under a launcher
    }
    if (checkpoints && done == o.save_at) SL_RETURN_IF_ERROR(save(done));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t trained = o.steps - result.start_step;
  if (trained > 0 && result.seconds > 0) result.tokens_per_second = trained * global_tokens / result.seconds;
  if (checkpoints && o.save_at < 0 && trained > 0) SL_RETURN_IF_ERROR(save(o.steps));

  // Held-out perplexity: samples of another stream, reduced over the DP group.
  if (o.eval_batches > 0) {
    lightning::metrics::Perplexity ppl;
    SL_RETURN_IF_ERROR(ppl.Bind(mesh->group(0)));
    const absl::Status evaluated = sharded::NoThrow([&]() -> absl::Status {
      at::NoGradGuard no_grad;
      for (int64_t b = 0; b < o.eval_batches; ++b) {
        const auto [ids, targets] = corpus->Samples(o.data_seed + 1, b * o.batch + mine_first, mine_count);
        SL_RETURN_IF_ERROR(ppl.Update(model->TokenLosses(ids, targets)));
      }
      return absl::OkStatus();
    });
    SL_RETURN_IF_ERROR(sharded::Agree(world, evaluated, "LM evaluation"));
    SL_ASSIGN_OR_RETURN(result.eval_perplexity, ppl.ComputeScalar());
  }
  for (const auto& [key, p] : params) result.state_bytes += 3 * p->local().numel() * p->local().element_size();
  result.peak_rss_bytes = PeakRssBytes();
  return result;
}

}  // namespace shardlight::simulate
