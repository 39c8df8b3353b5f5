#include "lightning/strategies/model_parallel_strategy.h"

#include <utility>

#include <ATen/core/grad_mode.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lightning/sharded_module.h"
#include "lightning/strategies/fsdp_tp_layout.h"
#include "lightning/tp/mesh_gradients.h"
#include "lightning/tp/mesh_optimizer.h"
#include "lightning/tp/tp_mesh.h"
#include "sharded/agreement.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {
namespace {

class ModelParallelRun : public StrategyRun {
 public:
  ModelParallelRun(c10::intrusive_ptr<c10d::ProcessGroup> world, tp::TpMesh tpm, tp::MeshParams params,
                   ModelParallelStrategy::ReducedHook on_reduced)
      : world_(std::move(world)), tp_(std::move(tpm)), params_(std::move(params)), on_reduced_(std::move(on_reduced)) {}

  absl::Status BeforeStep(int64_t step) override {
    step_ = step;
    return absl::OkStatus();
  }

  absl::Status ReduceGradients(const Trainables& trainables, const absl::Status& local,
                               absl::string_view op) override {
    // The verdict over the whole world first: a TP peer of a failed rank
    // must not wait for it in a DP collective.
    SL_RETURN_IF_ERROR(sharded::Agree(*world_, local, op));
    const absl::Status reduced = tp::AllreduceDataParallelGrads(tp_, params_);
    if (!reduced.ok()) return absl::UnavailableError(absl::StrCat(op, ": ", reduced.message()));
    return on_reduced_ ? on_reduced_(step_) : absl::OkStatus();
  }

  c10d::ProcessGroup& loss_group() override { return dp_group(); }

  absl::StatusOr<double> ClipGradients(const Trainables&, double max_norm, absl::string_view op) override {
    absl::StatusOr<double> norm = tp::ClipGradNorm(tp_, params_, max_norm);
    if (!norm.ok() && !absl::IsInvalidArgument(norm.status())) {
      return absl::UnavailableError(absl::StrCat(op, ": ", norm.status().message()));
    }
    return norm;
  }

  void ClipGradientValues(const Trainables&, double clip_value) override { tp::ClampGradValues(params_, clip_value); }

 private:
  c10d::ProcessGroup& dp_group() { return *tp_.mesh->group(0); }

  c10::intrusive_ptr<c10d::ProcessGroup> world_;
  tp::TpMesh tp_;
  tp::MeshParams params_;
  ModelParallelStrategy::ReducedHook on_reduced_;
  int64_t step_ = 0;
};

}  // namespace

absl::Status CheckMeshMembersOnly(LightningModule& module, const std::string& strategy) {
  if (!module.sharded_parameters().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        module.name(), "'s parameters are held sharded by an earlier fsdp Fit (e.g. \"",
        module.sharded_parameters().front().first, "\"); fit it with FsdpStrategy, or resume a fresh module"));
  }
  const Trainables trainables = TrainablesOf(module);
  if (!trainables.dense.empty() || !trainables.sharded.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        strategy, " trains mesh members only (the layers of //lightning/tp); ", module.name(), " has the ",
        trainables.dense.empty() ? "sharded member" : "dense parameter", " '",
        trainables.dense.empty() ? trainables.sharded.front().key : trainables.dense.front().key,
        "': make it a mesh member (tp::MakeParameter, replicated when it is not split)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StrategyRun>> ModelParallelStrategy::Setup(LightningModule& module,
                                                                          const ShardedContext& ctx) const {
  if (mesh_ == nullptr) {
    return absl::InvalidArgumentError("model_parallel needs a device mesh (data parallel x tensor parallel); got none");
  }
  std::vector<int64_t> shape;
  for (int d = 0; d < mesh_->ndim(); ++d) shape.push_back(mesh_->size(d));
  if (shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("model_parallel needs a 2-d mesh (data parallel x tensor parallel), "
                                                   "not ", absl::StrJoin(shape, "x")));
  }
  if (shape[0] * shape[1] != ctx.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("model_parallel: the mesh ", absl::StrJoin(shape, "x"), " has ",
                                                   shape[0] * shape[1], " ranks, the world ", ctx.world_size));
  }
  SL_RETURN_IF_ERROR(CheckMeshMembersOnly(module, name()));
  // A member an earlier fsdp_tp Fit chunked over DP holds 1/DP of its TP
  // piece: the TP layers would compute with the chunk. Putting it back is a
  // DP all-gather, which Setup (local) cannot run, and which the optimizer
  // built after Setup would need done already; so it is refused, frozen or not.
  for (const auto& [key, member] : MeshMembers(module, "")) {
    if (fsdp_tp_internal::HeldByFsdpTp(*member)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model_parallel: the mesh member '", key, "' of ", module.name(),
          " is held chunked over the data-parallel ranks by an earlier fsdp_tp Fit; fit it with FsdpTpStrategy "
          "(WithTensorParallelPieces runs evaluation on its whole TP pieces), or resume a fresh module from its "
          "checkpoint (an fsdp_tp checkpoint resumes under model_parallel)"));
    }
  }
  SL_ASSIGN_OR_RETURN(tp::TpMesh tpm, tp::TpMesh::Of(mesh_, 1));
  return std::unique_ptr<StrategyRun>(new ModelParallelRun(ctx.pg, std::move(tpm), tp::TrainableMeshMembers(module),
                                                         on_reduced_));
}

}  // namespace shardlight::lightning
