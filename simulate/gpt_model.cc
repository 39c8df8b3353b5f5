#include "simulate/gpt_model.h"

#include <ATen/core/grad_mode.h>

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "lightning/tp/vocab_parallel_cross_entropy.h"
#include "sharded/agreement.h"
#include "sharded/sharding_spec.h"
#include "sharded/status_macros.h"

namespace shardlight::simulate {

namespace tp = lightning::tp;

struct GptModel::Block : public lightning::ShardedModule {
  Block() : ShardedModule("GptBlock") {}
  std::shared_ptr<tp::ReplicatedLayerNorm> ln1, ln2;
  std::shared_ptr<lightning::ShardedModule> attn, mlp;
  std::shared_ptr<tp::ColumnParallelLinear> q, k, v, fc;
  std::shared_ptr<tp::RowParallelLinear> attn_proj, mlp_proj;
};

absl::Status CheckGptOptions(const GptOptions& o, int64_t tp_size) {
  if (o.vocab < 1 || o.dim < 1 || o.heads < 1 || o.layers < 1 || o.context < 1 || o.mlp_hidden < 1) {
    return absl::InvalidArgumentError(absl::StrCat("GPT sizes must be >= 1: vocab ", o.vocab, ", dim ", o.dim,
                                                   ", heads ", o.heads, ", layers ", o.layers, ", context ", o.context,
                                                   ", mlp_hidden ", o.mlp_hidden));
  }
  if (o.dim % o.heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("GPT dim ", o.dim, " is not a multiple of the ", o.heads, " heads"));
  }
  if (o.heads % tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor-parallel size ", tp_size, " does not divide the ", o.heads,
                                                   " attention heads"));
  }
  if (o.mlp_hidden % tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor-parallel size ", tp_size,
                                                   " does not divide the MLP hidden size ", o.mlp_hidden));
  }
  if (o.vocab < tp_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("a vocabulary of ", o.vocab, " cannot be split over ", tp_size, " tensor-parallel ranks"));
  }
  if (o.dtype != at::kFloat && o.dtype != at::kDouble) {
    return absl::InvalidArgumentError(
        absl::StrCat("the GPT model computes in float32 or float64, not ", c10::toString(o.dtype)));
  }
  return absl::OkStatus();
}

GptModel::GptModel(GptOptions options, tp::AdamWOptions adam)
    : LightningModule("GptModel"), options_(options), adam_(adam) {}

absl::Status GptModel::ConfigureShardedModel(const lightning::ShardedContext& ctx) {
  absl::Status setup = absl::OkStatus();
  if (ctx.mesh == nullptr || ctx.mesh->ndim() != 2) {
    setup = absl::InvalidArgumentError(
        "GptModel is laid out on a 2-d device mesh (data parallel x tensor parallel): train it with "
        "ModelParallelStrategy");
  } else {
    absl::StatusOr<tp::TpMesh> tpm = tp::TpMesh::Of(ctx.mesh, 1);
    setup = tpm.ok() ? CheckGptOptions(options_, tpm->tp_size()) : tpm.status();
    if (tpm.ok()) tp_ = *std::move(tpm);
  }
  SL_RETURN_IF_ERROR(sharded::Agree(*ctx.pg, setup, "GPT model setup"));
  const GptOptions& o = options_;
  uint64_t seed = ctx.seed * 1000;
  const double proj_std = o.init_std / std::sqrt(2.0 * static_cast<double>(o.layers));
  SL_ASSIGN_OR_RETURN(tok_, tp::VocabParallelEmbedding::Create(tp_, {o.vocab, o.dim, o.init_std, ++seed}));
  register_module("tok", tok_);
  pos_ = register_module("pos", std::make_shared<lightning::ShardedModule>("Positions"));
  SL_ASSIGN_OR_RETURN(sharded::mesh::MeshTensor pos,
                      tp::MakeParameter(tp_, {{o.context, o.dim}, -1, tp::ParamInit::kNormal, o.init_std, ++seed}));
  SL_RETURN_IF_ERROR(pos_->RegisterMeshTensor("weight", std::move(pos)));
  for (int64_t i = 0; i < o.layers; ++i) {
    auto b = std::make_shared<Block>();
    SL_ASSIGN_OR_RETURN(b->ln1, tp::ReplicatedLayerNorm::Create(tp_, o.dim));
    SL_ASSIGN_OR_RETURN(b->ln2, tp::ReplicatedLayerNorm::Create(tp_, o.dim));
    SL_ASSIGN_OR_RETURN(b->q, tp::ColumnParallelLinear::Create(tp_, {o.dim, o.dim, true, o.init_std, ++seed}));
    SL_ASSIGN_OR_RETURN(b->k, tp::ColumnParallelLinear::Create(tp_, {o.dim, o.dim, true, o.init_std, ++seed}));
    SL_ASSIGN_OR_RETURN(b->v, tp::ColumnParallelLinear::Create(tp_, {o.dim, o.dim, true, o.init_std, ++seed}));
    SL_ASSIGN_OR_RETURN(b->attn_proj, tp::RowParallelLinear::Create(tp_, {o.dim, o.dim, true, proj_std, ++seed}));
    SL_ASSIGN_OR_RETURN(b->fc, tp::ColumnParallelLinear::Create(tp_, {o.dim, o.mlp_hidden, true, o.init_std, ++seed}));
    SL_ASSIGN_OR_RETURN(b->mlp_proj, tp::RowParallelLinear::Create(tp_, {o.mlp_hidden, o.dim, true, proj_std, ++seed}));
    b->register_module("ln1", b->ln1);
    b->attn = b->register_module("attn", std::make_shared<lightning::ShardedModule>("Attention"));
    b->attn->register_module("q", b->q);
    b->attn->register_module("k", b->k);
    b->attn->register_module("v", b->v);
    b->attn->register_module("proj", b->attn_proj);
    b->register_module("ln2", b->ln2);
    b->mlp = b->register_module("mlp", std::make_shared<lightning::ShardedModule>("Mlp"));
    b->mlp->register_module("fc", b->fc);
    b->mlp->register_module("proj", b->mlp_proj);
    blocks_.push_back(register_module(absl::StrCat("block", i), b));
  }
  SL_ASSIGN_OR_RETURN(ln_f_, tp::ReplicatedLayerNorm::Create(tp_, o.dim));
  register_module("ln_f", ln_f_);
  SL_ASSIGN_OR_RETURN(head_, tp::ColumnParallelLinear::Create(tp_, {o.dim, o.vocab, false, o.init_std, ++seed}));
  register_module("head", head_);
  if (o.dtype != at::kFloat) {
    // Widened in place (as Module::to does): the layers read their weights
    // through the members on every forward, so nothing else holds the old data.
    at::NoGradGuard no_grad;
    for (auto& [key, m] : lightning::MeshMembers(*this, "")) m->local().set_data(m->local().to(o.dtype));
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> GptModel::TrainingStep(const lightning::Batch& batch, const lightning::StepContext&) {
  if (batch.size() != 2 || batch[0].dim() != 2 || !batch[0].sizes().equals(batch[1].sizes()) ||
      batch[0].size(1) > options_.context) {
    return absl::InvalidArgumentError(absl::StrCat("GptModel::TrainingStep wants (ids, targets) of one [B, T] shape "
                                                   "with T <= ", options_.context, "; got ", batch.size(), " tensors"));
  }
  const int64_t samples = batch[0].size(0), tokens = batch[0].numel();
  const auto [first, count] = sharded::ChunkRanges(samples, tp_.mesh->size(0))[tp_.mesh->coords()[0]];
  return TokenLosses(batch[0].narrow(0, first, count), batch[1].narrow(0, first, count)).sum() /
         static_cast<double>(tokens);
}

absl::StatusOr<std::unique_ptr<lightning::Optimizer>> GptModel::ConfigureOptimizers() {
  SL_ASSIGN_OR_RETURN(std::unique_ptr<tp::MeshAdamWOptimizer> adam,
                      tp::MeshAdamWOptimizer::Create(tp::TrainableMeshMembers(*this), adam_));
  optimizer_ = adam.get();
  return std::unique_ptr<lightning::Optimizer>(std::move(adam));
}

at::Tensor GptModel::TokenLosses(const at::Tensor& ids, const at::Tensor& targets) {
  const int64_t batch = ids.size(0), t = ids.size(1);
  const int64_t head_dim = options_.dim / options_.heads;
  const int64_t local_heads = options_.heads / tp_.tp_size();
  at::Tensor x = tok_->Forward(ids) + pos_->mesh_tensor("weight")->local().narrow(0, 0, t);
  const at::Tensor causal = at::ones({t, t}, at::kBool).triu(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  for (const auto& b : blocks_) {
    const at::Tensor h = b->ln1->Forward(x);
    // [B, T, local heads * head_dim] -> [B, local heads, T, head_dim].
    auto heads = [&](const at::Tensor& y) { return y.view({batch, t, local_heads, head_dim}).transpose(1, 2); };
    const at::Tensor q = heads(b->q->Forward(h)), k = heads(b->k->Forward(h)), v = heads(b->v->Forward(h));
    const at::Tensor scores = at::matmul(q, k.transpose(-2, -1)).mul(scale).masked_fill(causal, -std::numeric_limits<float>::infinity());
    const at::Tensor attended = at::matmul(at::softmax(scores, -1), v).transpose(1, 2).reshape({batch, t, local_heads * head_dim});
    x = x + b->attn_proj->Forward(attended);
    x = x + b->mlp_proj->Forward(at::gelu(b->fc->Forward(b->ln2->Forward(x))));
  }
  const at::Tensor logits = head_->Forward(ln_f_->Forward(x));  // [B, T, local vocab]
  const auto [vocab_start, local_vocab] = tp::VocabRange(tp_, options_.vocab);
  return tp::VocabParallelCrossEntropy(logits.reshape({batch * t, local_vocab}), targets.reshape({-1}), vocab_start,
                                       tp_.tp_group())
      .view({batch, t});
}

}  // namespace shardlight::simulate
