// GptModel: a GPT-style decoder-only language model, tensor parallel on the
// TP dim of a DP x TP mesh (lightning/tp): token embedding (vocabulary
// parallel) + learned positions, N pre-norm blocks of causal multi-head
// self-attention (q, k, v column-parallel, heads split over TP; output
// projection row-parallel) and a GELU MLP (column- then row-parallel), a
// final layer norm and an untied output head (column-parallel over the
// vocabulary) whose logits stay split: the loss is the vocabulary-parallel
// cross-entropy, never the full logits.
//
// Every parameter is a mesh member, so StateDictOf / LoadStateDict carry the
// model through checkpoints onto any other mesh. Keys: "tok.weight",
// "pos.weight", "block<i>.{ln1,ln2}.{weight,bias}",
// "block<i>.attn.{q,k,v,proj}.{weight,bias}", "block<i>.mlp.{fc,proj}.
// {weight,bias}", "ln_f.{weight,bias}", "head.weight". Initial values are
// functions of the seed and global index (the same model on any mesh).
//
// A LightningModule trained by lightning::Trainer under every strategy:
//  - model_parallel (lightning/strategies/model_parallel_strategy.h):
//    ConfigureShardedModel builds the layers on the mesh the strategy hands
//    it (dim 0 data parallel, dim 1 tensor parallel), AdamW over the mesh
//    members (tp::MeshAdamWOptimizer), or SGD (tp::MeshSgdOptimizer);
//  - ddp and fsdp (no mesh in the context): dense layers (torch::nn Linear,
//    LayerNorm, Embedding; full logits, a plain cross-entropy), the same keys
//    and initial values as the TP build, data parallel over the whole
//    group, AdamW over the module's trainables (lightning::AdamW; weight
//    decay on >= 2-dim tensors only, as MeshAdamW), or SGD (lightning::Sgd).
//    Under fsdp each block is a unit (FsdpUnits(): fully_shard per block,
//    the root holds the rest): the forward runs each block through
//    lightning::RunFsdpUnit, in order, and reads a block's parameters only
//    there (the embeddings, positions, final norm and head are the root's,
//    read outside the blocks), so FsdpOptions::per_unit gathers one block at
//    a time; under every other strategy the call is the block's plain
//    forward. A 1x1 model_parallel
//    run, a W=1 ddp run and a W=1 fsdp run train the same model.
// TrainingStep takes a global batch (ids, targets [B, T] int64), computes
// this rank's DP share (torch.chunk of the B samples by the DP coordinate)
// and returns its part of the mean token cross-entropy of the global batch
// (sum over its tokens / (B * T)), the same on every TP rank.
#ifndef SHARDLIGHT_SIMULATE_GPT_MODEL_H_
#define SHARDLIGHT_SIMULATE_GPT_MODEL_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lightning/lightning_module.h"
#include "lightning/optimizer.h"
#include "lightning/tp/mesh_adamw.h"
#include "lightning/tp/tp_mesh.h"

namespace shardlight::simulate {

struct GptOptions {
  int64_t vocab = 256;  // byte tokens
  int64_t dim = 96;
  int64_t heads = 12;
  int64_t layers = 2;
  int64_t context = 64;
  int64_t mlp_hidden = 384;
  double init_std = 0.02;
  // Parameters, activations, gradients and AdamW moments: float32, or
  // float64 (the initial weights are the float32 ones, widened), which takes
  // fp32 rounding out of a comparison with another implementation.
  at::ScalarType dtype = at::kFloat;
  // The dense build (ddp, fsdp, hsdp) registers its parameters deferred
  // (lightning/deferred_init.h): no storage until the strategy's Setup fills
  // this rank's dim-0 chunk (fsdp, hsdp) or the Trainer's
  // MaterializeDeferred fills them whole (ddp), with the eager build's
  // values bit for bit. So no rank ever holds the whole model under fsdp.
  // The TP build (model_parallel) ignores it: each rank builds its shards.
  // Using the model before materialisation (TrainingStep, TokenLosses) is a
  // FailedPrecondition naming the parameter.
  bool deferred_init = false;
};

// The optimizer ConfigureOptimizers builds (GptModel's constructor):
//  - tp::AdamWOptions: torch.optim.AdamW with GPT's two parameter groups,
//    decoupled weight decay on tensors of 2 or more dims only;
//  - lightning::SgdOptions: torch.optim.SGD, one group (momentum, weight
//    decay added to the gradient of every parameter, as torch's).
// Either over the mesh members (the TP build: tp::MeshAdamWOptimizer,
// tp::MeshSgdOptimizer) or the module's trainables (dense: fsdp's shards).
using GptOptimizer = std::variant<lightning::tp::AdamWOptions, lightning::SgdOptions>;

// Local: InvalidArgument naming what does not fit -- sizes < 1, dim not a
// multiple of heads, a TP size that does not divide the heads or the MLP
// hidden size, a vocabulary smaller than the TP size, a dtype other than
// float32 or float64.
absl::Status CheckGptOptions(const GptOptions& options, int64_t tp_size);

class GptModel : public lightning::LightningModule {
 public:
  explicit GptModel(GptOptions options, GptOptimizer optimizer = lightning::tp::AdamWOptions{});

  // Collective over ctx.pg: CheckGptOptions (TP size 1 without a mesh; with
  // one, that it is 2-d: ModelParallelStrategy's) agreed on every rank (one
  // rank's error is every rank's), then the layers -- on the mesh, or dense
  // without one -- initialised from ctx.seed.
  absl::Status ConfigureShardedModel(const lightning::ShardedContext& ctx) override;
  // Collective over the TP group (see above). InvalidArgument for a batch
  // that is not (ids, targets) of the same [B, T] shape with T <= context;
  // FailedPrecondition naming a deferred parameter not yet materialised.
  absl::StatusOr<at::Tensor> TrainingStep(const lightning::Batch& batch, const lightning::StepContext& ctx) override;
  absl::StatusOr<std::unique_ptr<lightning::Optimizer>> ConfigureOptimizers() override;
  // The optimizer the last ConfigureOptimizers made (null before): its state
  // is what a checkpoint of this model's training holds besides the model.
  lightning::Optimizer* optimizer() const { return optimizer_; }

  // ids, targets [B, T] int64 (T <= context): the per-token losses [B, T],
  // the same on every TP rank. Collective over the TP group (throws on a
  // failed collective, as LibTorch ops do); local for the dense build.
  // Throws naming a deferred parameter not yet materialised.
  at::Tensor TokenLosses(const at::Tensor& ids, const at::Tensor& targets);

  const GptOptions& options() const { return options_; }
  // Whether the last ConfigureShardedModel built the TP layers (a mesh).
  bool tensor_parallel() const { return tp_.mesh != nullptr; }
  // Valid when tensor_parallel().
  const lightning::tp::TpMesh& tp() const { return tp_; }
  // The data-parallel group of the last ConfigureShardedModel: the mesh's
  // DP dim, or the whole group of the dense build.
  c10::intrusive_ptr<c10d::ProcessGroup> dp_group() const;
  int64_t dp_rank() const { return dp_rank_; }
  int64_t dp_size() const { return dp_size_; }

  // The FSDP units of the dense build: one per block ("block<i>"), as
  // fully_shard is applied to each block and then to the root.
  static std::vector<std::string> FsdpUnits(const GptOptions& options);

 private:
  struct Block;
  using Layer = std::function<at::Tensor(const at::Tensor&)>;
  absl::Status BuildTensorParallel(uint64_t seed);
  absl::Status BuildDense(uint64_t seed);

  GptOptions options_;
  GptOptimizer optimizer_options_;
  lightning::Optimizer* optimizer_ = nullptr;  // owned by the Trainer's Fit
  lightning::tp::TpMesh tp_;                   // mesh null for the dense build
  c10::intrusive_ptr<c10d::ProcessGroup> dense_group_;
  int64_t dp_rank_ = 0, dp_size_ = 1;
  std::vector<std::shared_ptr<Block>> blocks_;
  // The layers outside the blocks, as callables of either build: the token
  // embedding, the positions [context, dim], the final norm, the head and
  // the per-token loss of (logits [N, local vocab], targets [N]).
  Layer tok_, ln_f_, head_;
  std::function<at::Tensor()> positions_;
  std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss_;
};

}  // namespace shardlight::simulate

#endif  // SHARDLIGHT_SIMULATE_GPT_MODEL_H_
