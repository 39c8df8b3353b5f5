#include "lightning/trainer.h"

#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lightning/collective_probe.h"
#include "lightning/metrics/metric.h"
#include "lightning/state_dict_hooks.h"
#include "sharded/collectives.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {
namespace {

namespace ckpt = sharded::checkpoint;

// Sums every dense gradient across ranks in one flat allreduce that also
// carries a failure count: a rank whose step failed still joins it (with
// zero gradients), and every rank then returns that rank's error.
absl::Status AllreduceDenseGrads(const Trainables& trainables, c10d::ProcessGroup& pg, const absl::Status& local) {
  std::vector<at::Tensor> parts;
  for (const auto& d : trainables.dense) {
    if (!d.param.grad().defined() || !local.ok()) d.param.mutable_grad() = at::zeros_like(d.param);
    parts.push_back(d.param.grad().reshape({-1}).to(at::kFloat));
  }
  parts.push_back(at::full({1}, local.ok() ? 0.0f : 1.0f));
  std::vector<at::Tensor> flat = {at::cat(parts)};
  if (pg.getSize() > 1) SL_RETURN_IF_ERROR(sharded::WaitFor(pg.allreduce(flat), "allreduce of dense gradients"));
  if (flat[0][-1].item<float>() > 0) {
    // Some rank failed: all learn which, and why, the same way.
    SL_RETURN_IF_ERROR(sharded::AgreeOn(pg, local.ok() ? absl::StatusOr<uint64_t>(0) : local, "training step"));
    return absl::InternalError("a rank reported a failed training step but no error");
  }
  int64_t pos = 0;
  for (const auto& d : trainables.dense) {
    const int64_t n = d.param.numel();
    d.param.mutable_grad().copy_(flat[0].narrow(0, pos, n).view_as(d.param));
    pos += n;
  }
  return absl::OkStatus();
}

// TrainingStep and backward on this rank; errors (and exceptions) become a
// status so the rank still joins the gradient allreduce.
absl::Status LocalStep(LightningModule& module, const Batch& batch, const StepContext& ctx, at::Tensor* loss) {
  try {
    SL_ASSIGN_OR_RETURN(*loss, module.TrainingStep(batch, ctx));
    if (!loss->defined() || loss->numel() != 1) {
      return absl::InvalidArgumentError(absl::StrCat("TrainingStep returned a loss with ",
                                                     loss->defined() ? loss->numel() : 0, " elements; want a scalar"));
    }
    if (loss->requires_grad()) loss->backward();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("training step ", ctx.step, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("training step ", ctx.step, ": ", e.what()));
  }
  return absl::OkStatus();
}

// Rank 0's answer to "is there a committed checkpoint?", shared with all.
absl::StatusOr<bool> CheckpointCommitted(const std::string& dir, c10d::ProcessGroup& pg) {
  const bool here = ckpt::HasCommittedCheckpoint(dir);
  SL_ASSIGN_OR_RETURN(std::vector<std::string> all, sharded::AllgatherStrings(pg, here ? "1" : "0"));
  return all[0] == "1";
}

template <typename F>
absl::Status ForEachCallback(const std::vector<std::shared_ptr<Callback>>& callbacks, F&& f) {
  for (const auto& c : callbacks) SL_RETURN_IF_ERROR(f(*c));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<sharded::StateDict> TrainingStateDict(LightningModule& module, Optimizer& optimizer,
                                                     const at::Tensor& step) {
  SL_ASSIGN_OR_RETURN(sharded::StateDict model, StateDictOf(module));
  sharded::StateDict dict;
  for (const auto& [key, value] : model.entries()) SL_RETURN_IF_ERROR(dict.Insert("model." + key, value));
  SL_RETURN_IF_ERROR(optimizer.AddStateTo(dict, "optimizer."));
  SL_RETURN_IF_ERROR(dict.Insert("trainer.step", step));
  return dict;
}

Trainer::Trainer(TrainerOptions options, std::vector<std::shared_ptr<Callback>> callbacks)
    : options_(std::move(options)), callbacks_(std::move(callbacks)) {
  if (options_.log_every > 0) callbacks_.push_back(std::make_shared<ProgressCallback>(std::cout, options_.log_every));
}

absl::StatusOr<FitResult> Trainer::Fit(LightningModule& module, const DataSource& data,
                                       c10::intrusive_ptr<c10d::ProcessGroup> pg) {
  if (!pg) return absl::InvalidArgumentError("Fit needs a process group");
  TrainState state{pg->getRank(), pg->getSize(), 0, options_.max_steps};
  if (options_.max_epochs > 0 && data.steps_per_epoch() > 0) {
    state.max_steps = std::min(state.max_steps, options_.max_epochs * data.steps_per_epoch());
  }
  // Setup: the collectives must work before any sharded state is created.
  SL_RETURN_IF_ERROR(ProbeCollectives(*pg, options_.probe_timeout));
  SL_RETURN_IF_ERROR(module.ConfigureShardedModel({pg, state.rank, state.world_size, options_.seed}));
  SL_RETURN_IF_ERROR(metrics::BindMetrics(module, pg));  // metrics: reduce over pg, sharded states created
  SL_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, module.ConfigureOptimizers());
  if (optimizer == nullptr) return absl::InvalidArgumentError(module.name() + "::ConfigureOptimizers returned null");
  const Trainables trainables = TrainablesOf(module);
  at::Tensor step = at::zeros({1}, at::kLong);
  SL_ASSIGN_OR_RETURN(sharded::StateDict checkpoint_state, TrainingStateDict(module, *optimizer, step));

  const bool checkpoints = !options_.checkpoint_dir.empty();
  if (checkpoints && options_.resume) {
    SL_ASSIGN_OR_RETURN(bool committed, CheckpointCommitted(options_.checkpoint_dir, *pg));
    if (committed) {
      // metrics: cat states take their sizes from the checkpoint; the dict is rebuilt to match.
      SL_RETURN_IF_ERROR(metrics::PrepareCheckpointLoad(module, "model.", options_.checkpoint_dir, *pg));
      SL_ASSIGN_OR_RETURN(checkpoint_state, TrainingStateDict(module, *optimizer, step));
      ckpt::LoadOptions load;
      load.verify_before_write = true;  // a damaged checkpoint changes nothing
      SL_RETURN_IF_ERROR(ckpt::LoadCheckpoint(checkpoint_state, options_.checkpoint_dir, *pg, load));
      state.start_step = step[0].item<int64_t>();
      SL_RETURN_IF_ERROR(ForEachCallback(callbacks_, [&](Callback& c) {
        return c.OnLoadCheckpoint(state, state.start_step, options_.checkpoint_dir);
      }));
    }
  }
  FitResult result;
  result.start_step = state.start_step;
  SL_RETURN_IF_ERROR(ForEachCallback(callbacks_, [&](Callback& c) { return c.OnTrainStart(state); }));

  auto save = [&](int64_t done) -> absl::Status {
    SL_RETURN_IF_ERROR(ForEachCallback(callbacks_, [&](Callback& c) { return c.OnSaveStart(state, done); }));
    // metrics: rebuilt so metric states are synced and grown (cat) states saved at their current size.
    SL_ASSIGN_OR_RETURN(checkpoint_state, TrainingStateDict(module, *optimizer, step));
    SL_RETURN_IF_ERROR(ckpt::SaveCheckpoint(checkpoint_state, options_.checkpoint_dir, *pg, options_.save_options));
    ++result.checkpoints_saved;
    return ForEachCallback(callbacks_, [&](Callback& c) {
      return c.OnSaveCheckpoint(state, done, options_.checkpoint_dir);
    });
  };

  for (int64_t s = state.start_step; s < state.max_steps; ++s) {
    optimizer->ZeroGrad();
    at::Tensor loss;
    const absl::Status local = LocalStep(module, data.GetBatch(s), {s, state.rank, state.world_size, pg}, &loss);
    SL_RETURN_IF_ERROR(AllreduceDenseGrads(trainables, *pg, local));
    optimizer->Step();
    std::vector<at::Tensor> global_loss = {loss.detach().to(at::kDouble).reshape({1}).clone()};
    SL_RETURN_IF_ERROR(sharded::WaitFor(pg->allreduce(global_loss), "allreduce of the loss"));
    const int64_t done = s + 1;
    step.fill_(done);
    result.losses.push_back(global_loss[0].item<double>());
    SL_RETURN_IF_ERROR(ForEachCallback(callbacks_, [&](Callback& c) {
      return c.OnStepEnd(state, done, result.losses.back());
    }));
    if (checkpoints && options_.checkpoint_every > 0 && done % options_.checkpoint_every == 0 &&
        done != state.max_steps) {
      SL_RETURN_IF_ERROR(save(done));
    }
  }
  if (checkpoints && state.start_step < state.max_steps) SL_RETURN_IF_ERROR(save(state.max_steps));
  result.end_step = std::max(state.start_step, state.max_steps);
  return result;
}

}  // namespace shardlight::lightning
