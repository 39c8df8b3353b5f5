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
// A LightningModule trained by lightning::Trainer with ModelParallelStrategy
// (lightning/strategies/model_parallel_strategy.h): ConfigureShardedModel
// builds the layers on the mesh the strategy hands it (dim 0 data parallel,
// dim 1 tensor parallel); TrainingStep takes a global batch (ids, targets
// [B, T] int64), computes this rank's DP share (torch.chunk of the B samples
// by the DP coordinate) and returns its part of the mean token
// cross-entropy of the global batch (sum over its tokens / (B * T)), the same
// on every TP rank; ConfigureOptimizers is AdamW over the mesh members
// (tp::MeshAdamWOptimizer with the AdamWOptions given).
#ifndef SHARDLIGHT_SIMULATE_GPT_MODEL_H_
#define SHARDLIGHT_SIMULATE_GPT_MODEL_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lightning/lightning_module.h"
#include "lightning/tp/layer_norm.h"
#include "lightning/tp/mesh_optimizer.h"
#include "lightning/tp/parallel_linear.h"
#include "lightning/tp/tp_mesh.h"
#include "lightning/tp/vocab_parallel_embedding.h"

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
};

// Local: InvalidArgument naming what does not fit -- sizes < 1, dim not a
// multiple of heads, a TP size that does not divide the heads or the MLP
// hidden size, a vocabulary smaller than the TP size, a dtype other than
// float32 or float64.
absl::Status CheckGptOptions(const GptOptions& options, int64_t tp_size);

class GptModel : public lightning::LightningModule {
 public:
  explicit GptModel(GptOptions options, lightning::tp::AdamWOptions adam = {});

  // Collective over ctx.pg: CheckGptOptions (and that ctx.mesh is a 2-d
  // mesh: train it with ModelParallelStrategy) agreed on every rank (one
  // rank's error is every rank's), then the layers on the mesh, initialised
  // from ctx.seed.
  absl::Status ConfigureShardedModel(const lightning::ShardedContext& ctx) override;
  // Collective over the TP group (see above). InvalidArgument for a batch
  // that is not (ids, targets) of the same [B, T] shape with T <= context.
  absl::StatusOr<at::Tensor> TrainingStep(const lightning::Batch& batch, const lightning::StepContext& ctx) override;
  absl::StatusOr<std::unique_ptr<lightning::Optimizer>> ConfigureOptimizers() override;
  // The optimizer the last ConfigureOptimizers made (null before): its state
  // is what a checkpoint of this model's training holds besides the model.
  lightning::tp::MeshAdamWOptimizer* optimizer() const { return optimizer_; }

  // ids, targets [B, T] int64 (T <= context): the per-token losses [B, T],
  // the same on every TP rank. Collective over the TP group (throws on a
  // failed collective, as LibTorch ops do).
  at::Tensor TokenLosses(const at::Tensor& ids, const at::Tensor& targets);

  const GptOptions& options() const { return options_; }
  const lightning::tp::TpMesh& tp() const { return tp_; }

 private:
  struct Block;
  GptOptions options_;
  lightning::tp::AdamWOptions adam_;
  lightning::tp::MeshAdamWOptimizer* optimizer_ = nullptr;  // owned by the Trainer's Fit
  lightning::tp::TpMesh tp_;
  std::shared_ptr<lightning::tp::VocabParallelEmbedding> tok_;
  std::shared_ptr<lightning::ShardedModule> pos_;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::shared_ptr<lightning::tp::ReplicatedLayerNorm> ln_f_;
  std::shared_ptr<lightning::tp::ColumnParallelLinear> head_;
};

}  // namespace shardlight::simulate

#endif  // SHARDLIGHT_SIMULATE_GPT_MODEL_H_
