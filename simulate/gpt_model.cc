#include "simulate/gpt_model.h"

#include <ATen/core/grad_mode.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "lightning/deferred_init.h"
#include "lightning/strategies/fsdp_unit.h"
#include "lightning/tp/layer_norm.h"
#include "lightning/tp/mesh_optimizer.h"
#include "lightning/tp/parallel_linear.h"
#include "lightning/tp/vocab_parallel_cross_entropy.h"
#include "lightning/tp/vocab_parallel_embedding.h"
#include "sharded/agreement.h"
#include "sharded/global_random.h"
#include "sharded/sharding_spec.h"
#include "sharded/status_macros.h"

namespace shardlight::simulate {

namespace tp = lightning::tp;

// A decoder block: its submodules registered under the checkpoint keys
// (ln1, attn.{q,k,v,proj}, ln2, mlp.{fc,proj}), its layers as callables of
// either build.
struct GptModel::Block : public lightning::ShardedModule {
  Block() : ShardedModule("GptBlock") {}
  // Registers the layers (ln1, attn.{q,k,v,proj}, ln2, mlp.{fc,proj}, in
  // this order) and keeps their forwards.
  template <typename N, typename C, typename R>
  void Assemble(N ln1_m, C q_m, C k_m, C v_m, R attn_proj_m, N ln2_m, C fc_m, R mlp_proj_m);
  Layer ln1, ln2, q, k, v, attn_proj, fc, mlp_proj;
};

namespace {

// A layer's Forward as a GptModel::Layer: a TP layer's Forward, a torch::nn
// module's forward.
template <typename L>
std::function<at::Tensor(const at::Tensor&)> LayerOf(std::shared_ptr<L> layer) {
  return [layer](const at::Tensor& x) { return layer->Forward(x); };
}
template <typename M>
std::function<at::Tensor(const at::Tensor&)> LayerOf(torch::nn::ModuleHolder<M> module) {
  return [module](const at::Tensor& x) mutable { return module->forward(x); };
}

// N(0, std^2) by global index from `seed`, as tp::MakeParameter fills a
// whole parameter (float32, then scaled): the TP build's values at TP = 1.
// Any dim-0 row range of a parameter of `sizes` gets the same elements of
// the same global indices (the same bits), written in the rows' dtype as
// the eager build's widening does.
lightning::RowInitializer NormalRows(std::vector<int64_t> sizes, double std, uint64_t seed) {
  return [sizes, std, seed](at::Tensor& rows, int64_t first_row) -> absl::Status {
    std::vector<int64_t> box = sizes, offsets(sizes.size(), 0);
    box[0] = rows.size(0);
    offsets[0] = first_row;
    at::Tensor t = at::empty(box, at::kFloat);
    sharded::FillGlobalRandom(t, offsets, sizes, seed, sharded::RandomKind::kNormal);
    rows.copy_(t.mul_(std));
    return absl::OkStatus();
  };
}

lightning::RowInitializer ConstantRows(double value) {
  return [value](at::Tensor& rows, int64_t) -> absl::Status {
    rows.fill_(value);
    return absl::OkStatus();
  };
}

// `param` deferred with `init` (GptOptions::deferred_init), else filled by it now.
void Initialize(at::Tensor& param, lightning::RowInitializer init, bool deferred) {
  if (deferred) {
    const absl::Status status = lightning::DeferParameter(param, std::move(init));
    TORCH_CHECK(status.ok(), status.ToString());
    return;
  }
  at::NoGradGuard no_grad;
  const absl::Status status = init(param, 0);
  TORCH_CHECK(status.ok(), status.ToString());
}

// A dense Linear(in, out) with the TP layers' initial values: weight
// NormalRows [out, in], bias zeros.
torch::nn::Linear DenseLinear(int64_t in, int64_t out, bool bias, double std, uint64_t seed, bool deferred) {
  torch::nn::Linear linear(torch::nn::LinearOptions(in, out).bias(bias));
  Initialize(linear->weight, NormalRows({out, in}, std, seed), deferred);
  if (bias) Initialize(linear->bias, ConstantRows(0), deferred);
  return linear;
}

torch::nn::LayerNorm DenseLayerNorm(int64_t dim, bool deferred) {
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({dim}).eps(1e-5));  // weight ones, bias zeros
  if (deferred) {
    Initialize(norm->weight, ConstantRows(1), true);
    Initialize(norm->bias, ConstantRows(0), true);
  }
  return norm;
}

// torch.optim.AdamW with GPT's two parameter groups, over the trainables of
// the dense build: decoupled weight decay on tensors of 2 or more dims
// (matrices, embeddings; a dim-0 shard keeps its dims), none on biases and
// norm gains -- as tp::MeshAdamW. AdamW's first operation on a parameter is
// the decay (param *= 1 - lr * weight_decay) and nothing after it reads the
// old value, so decaying here and then stepping lightning::AdamW without
// decay is AdamW's update, operation for operation. State and keys are
// lightning::AdamW's.
class GptAdamW : public lightning::Optimizer {
 public:
  static absl::StatusOr<std::unique_ptr<GptAdamW>> Create(lightning::Trainables trainables,
                                                          const tp::AdamWOptions& o) {
    if (!(o.weight_decay >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat("AdamW options: weight_decay ", o.weight_decay, " must be >= 0"));
    }
    SL_ASSIGN_OR_RETURN(std::unique_ptr<lightning::AdamW> adam,
                        lightning::AdamW::Create(trainables, {o.lr, o.beta1, o.beta2, o.eps, /*weight_decay=*/0.0}));
    return std::unique_ptr<GptAdamW>(new GptAdamW(std::move(trainables), std::move(adam), o.weight_decay));
  }
  void Step() override {
    if (weight_decay_ != 0) {
      at::NoGradGuard no_grad;
      const double keep = 1 - adam_->lr() * weight_decay_;
      for (const at::Tensor& p : trainables_.LocalTensors()) {
        if (p.dim() >= 2 && p.grad().defined()) p.mul_(keep);
      }
    }
    adam_->Step();
  }
  absl::Status AddStateTo(sharded::StateDict& dict, const std::string& prefix) override {
    return adam_->AddStateTo(dict, prefix);
  }
  // lightning::AdamW's, with this parameter's weight decay (its group's).
  lightning::ParamGroupFields ParamGroupOf(const std::string& key) const override {
    lightning::ParamGroupFields fields = adam_->ParamGroupOf(key);
    for (auto& [name, value] : fields) {
      if (name == "weight_decay") value = sharded::PlainValue::Float(Decays(key) ? weight_decay_ : 0.0);
    }
    return fields;
  }
  double lr() const override { return adam_->lr(); }

 private:
  GptAdamW(lightning::Trainables trainables, std::unique_ptr<lightning::AdamW> adam, double weight_decay)
      : Optimizer(std::move(trainables)), adam_(std::move(adam)), weight_decay_(weight_decay) {}
  void SetLr(double lr) override { (void)adam_->set_lr(lr); }
  // Whether the parameter `key` has 2 or more dims (its global sizes: a shard keeps its dims).
  bool Decays(const std::string& key) const {
    for (const auto& d : trainables_.dense) {
      if (d.key == key) return d.param.dim() >= 2;
    }
    for (const auto& s : trainables_.sharded) {
      if (s.key == key) return s.member->sizes().size() >= 2;
    }
    return false;
  }
  std::unique_ptr<lightning::AdamW> adam_;
  double weight_decay_;
};

}  // namespace

template <typename N, typename C, typename R>
void GptModel::Block::Assemble(N ln1_m, C q_m, C k_m, C v_m, R attn_proj_m, N ln2_m, C fc_m, R mlp_proj_m) {
  register_module("ln1", ln1_m);
  auto attn = register_module("attn", std::make_shared<lightning::ShardedModule>("Attention"));
  attn->register_module("q", q_m);
  attn->register_module("k", k_m);
  attn->register_module("v", v_m);
  attn->register_module("proj", attn_proj_m);
  register_module("ln2", ln2_m);
  auto mlp = register_module("mlp", std::make_shared<lightning::ShardedModule>("Mlp"));
  mlp->register_module("fc", fc_m);
  mlp->register_module("proj", mlp_proj_m);
  ln1 = LayerOf(ln1_m), ln2 = LayerOf(ln2_m), q = LayerOf(q_m), k = LayerOf(k_m), v = LayerOf(v_m);
  attn_proj = LayerOf(attn_proj_m), fc = LayerOf(fc_m), mlp_proj = LayerOf(mlp_proj_m);
}

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

GptModel::GptModel(GptOptions options, GptOptimizer optimizer)
    : LightningModule("GptModel"), options_(options), optimizer_options_(optimizer) {}

std::vector<std::string> GptModel::FsdpUnits(const GptOptions& options) {
  std::vector<std::string> units;
  for (int64_t i = 0; i < options.layers; ++i) units.push_back(absl::StrCat("block", i));
  return units;
}

c10::intrusive_ptr<c10d::ProcessGroup> GptModel::dp_group() const {
  return tensor_parallel() ? tp_.mesh->group(0) : dense_group_;
}

absl::Status GptModel::ConfigureShardedModel(const lightning::ShardedContext& ctx) {
  absl::Status setup = absl::OkStatus();
  if (ctx.mesh == nullptr) {
    setup = CheckGptOptions(options_, 1);
  } else if (ctx.mesh->ndim() != 2) {
    setup = absl::InvalidArgumentError(
        "GptModel is laid out on a 2-d device mesh (data parallel x tensor parallel) under ModelParallelStrategy, "
        "or densely without a mesh (ddp, fsdp)");
  } else {
    absl::StatusOr<tp::TpMesh> tpm = tp::TpMesh::Of(ctx.mesh, 1);
    setup = tpm.ok() ? CheckGptOptions(options_, tpm->tp_size()) : tpm.status();
    if (tpm.ok()) tp_ = *std::move(tpm);
  }
  SL_RETURN_IF_ERROR(sharded::Agree(*ctx.pg, setup, "GPT model setup"));
  if (tensor_parallel()) {
    dp_rank_ = tp_.mesh->coords()[0];
    dp_size_ = tp_.mesh->size(0);
    SL_RETURN_IF_ERROR(BuildTensorParallel(ctx.seed * 1000));
  } else {
    dense_group_ = ctx.pg;
    dp_rank_ = ctx.rank;
    dp_size_ = ctx.world_size;
    SL_RETURN_IF_ERROR(BuildDense(ctx.seed * 1000));
  }
  if (options_.dtype != at::kFloat) {
    // Widened in place (as Module::to does): the layers read their weights
    // through the members and parameters on every forward, so nothing else
    // holds the old data.
    at::NoGradGuard no_grad;
    for (auto& [key, m] : lightning::MeshMembers(*this, "")) m->local().set_data(m->local().to(options_.dtype));
    for (at::Tensor& p : parameters()) p.set_data(p.to(options_.dtype));
  }
  return absl::OkStatus();
}

// Seeds: tok, pos, then per block q, k, v, attn.proj, mlp.fc, mlp.proj, then
// the head, each the next of `seed` -- the same in both builds.
absl::Status GptModel::BuildTensorParallel(uint64_t seed) {
  const GptOptions& o = options_;
  const double proj_std = o.init_std / std::sqrt(2.0 * static_cast<double>(o.layers));
  SL_ASSIGN_OR_RETURN(auto tok, tp::VocabParallelEmbedding::Create(tp_, {o.vocab, o.dim, o.init_std, ++seed}));
  register_module("tok", tok);
  tok_ = LayerOf(tok);
  auto pos = register_module("pos", std::make_shared<lightning::ShardedModule>("Positions"));
  SL_ASSIGN_OR_RETURN(sharded::mesh::MeshTensor pos_weight,
                      tp::MakeParameter(tp_, {{o.context, o.dim}, -1, tp::ParamInit::kNormal, o.init_std, ++seed}));
  SL_RETURN_IF_ERROR(pos->RegisterMeshTensor("weight", std::move(pos_weight)));
  positions_ = [pos] { return pos->mesh_tensor("weight")->local(); };
  for (int64_t i = 0; i < o.layers; ++i) {
    auto b = std::make_shared<Block>();
    SL_ASSIGN_OR_RETURN(auto ln1, tp::ReplicatedLayerNorm::Create(tp_, o.dim));
    SL_ASSIGN_OR_RETURN(auto ln2, tp::ReplicatedLayerNorm::Create(tp_, o.dim));
    SL_ASSIGN_OR_RETURN(auto q, tp::ColumnParallelLinear::Create(tp_, {o.dim, o.dim, true, o.init_std, ++seed}));
    SL_ASSIGN_OR_RETURN(auto k, tp::ColumnParallelLinear::Create(tp_, {o.dim, o.dim, true, o.init_std, ++seed}));
    SL_ASSIGN_OR_RETURN(auto v, tp::ColumnParallelLinear::Create(tp_, {o.dim, o.dim, true, o.init_std, ++seed}));
    SL_ASSIGN_OR_RETURN(auto attn_proj, tp::RowParallelLinear::Create(tp_, {o.dim, o.dim, true, proj_std, ++seed}));
    SL_ASSIGN_OR_RETURN(auto fc, tp::ColumnParallelLinear::Create(tp_, {o.dim, o.mlp_hidden, true, o.init_std, ++seed}));
    SL_ASSIGN_OR_RETURN(auto mlp_proj, tp::RowParallelLinear::Create(tp_, {o.mlp_hidden, o.dim, true, proj_std, ++seed}));
    b->Assemble(ln1, q, k, v, attn_proj, ln2, fc, mlp_proj);
    blocks_.push_back(register_module(absl::StrCat("block", i), b));
  }
  SL_ASSIGN_OR_RETURN(auto ln_f, tp::ReplicatedLayerNorm::Create(tp_, o.dim));
  register_module("ln_f", ln_f);
  ln_f_ = LayerOf(ln_f);
  SL_ASSIGN_OR_RETURN(auto head, tp::ColumnParallelLinear::Create(tp_, {o.dim, o.vocab, false, o.init_std, ++seed}));
  register_module("head", head);
  head_ = LayerOf(head);
  const int64_t vocab_start = tp::VocabRange(tp_, o.vocab).first;
  const tp::TpMesh tpm = tp_;
  loss_ = [vocab_start, tpm](const at::Tensor& logits, const at::Tensor& targets) {
    return tp::VocabParallelCrossEntropy(logits, targets, vocab_start, tpm.tp_group());
  };
  return absl::OkStatus();
}

absl::Status GptModel::BuildDense(uint64_t seed) {
  const GptOptions& o = options_;
  const bool deferred = o.deferred_init;
  const double proj_std = o.init_std / std::sqrt(2.0 * static_cast<double>(o.layers));
  torch::nn::Embedding tok(o.vocab, o.dim);
  Initialize(tok->weight, NormalRows({o.vocab, o.dim}, o.init_std, ++seed), deferred);
  register_module("tok", tok);
  tok_ = LayerOf(tok);
  auto pos = register_module("pos", std::make_shared<lightning::ShardedModule>("Positions"));
  at::Tensor pos_weight = pos->register_parameter("weight", at::empty({o.context, o.dim}, at::kFloat));
  Initialize(pos_weight, NormalRows({o.context, o.dim}, o.init_std, ++seed), deferred);
  positions_ = [pos_weight] { return pos_weight; };
  for (int64_t i = 0; i < o.layers; ++i) {
    auto b = std::make_shared<Block>();
    auto ln1 = DenseLayerNorm(o.dim, deferred), ln2 = DenseLayerNorm(o.dim, deferred);
    auto q = DenseLinear(o.dim, o.dim, true, o.init_std, ++seed, deferred);
    auto k = DenseLinear(o.dim, o.dim, true, o.init_std, ++seed, deferred);
    auto v = DenseLinear(o.dim, o.dim, true, o.init_std, ++seed, deferred);
    auto attn_proj = DenseLinear(o.dim, o.dim, true, proj_std, ++seed, deferred);
    auto fc = DenseLinear(o.dim, o.mlp_hidden, true, o.init_std, ++seed, deferred);
    auto mlp_proj = DenseLinear(o.mlp_hidden, o.dim, true, proj_std, ++seed, deferred);
    b->Assemble(ln1, q, k, v, attn_proj, ln2, fc, mlp_proj);
    blocks_.push_back(register_module(absl::StrCat("block", i), b));
  }
  auto ln_f = DenseLayerNorm(o.dim, deferred);
  register_module("ln_f", ln_f);
  ln_f_ = LayerOf(ln_f);
  auto head = DenseLinear(o.dim, o.vocab, false, o.init_std, ++seed, deferred);
  register_module("head", head);
  head_ = LayerOf(head);
  loss_ = [](const at::Tensor& logits, const at::Tensor& targets) {
    return at::cross_entropy_loss(logits, targets, /*weight=*/{}, at::Reduction::None, /*ignore_index=*/-100,
                                  /*label_smoothing=*/0.0);
  };
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> GptModel::TrainingStep(const lightning::Batch& batch, const lightning::StepContext&) {
  if (batch.size() != 2 || batch[0].dim() != 2 || !batch[0].sizes().equals(batch[1].sizes()) ||
      batch[0].size(1) > options_.context) {
    return absl::InvalidArgumentError(absl::StrCat("GptModel::TrainingStep wants (ids, targets) of one [B, T] shape "
                                                   "with T <= ", options_.context, "; got ", batch.size(), " tensors"));
  }
  SL_RETURN_IF_ERROR(lightning::CheckMaterialized(*this));
  const int64_t samples = batch[0].size(0), tokens = batch[0].numel();
  const auto [first, count] = sharded::ChunkRanges(samples, dp_size_)[dp_rank_];
  return TokenLosses(batch[0].narrow(0, first, count), batch[1].narrow(0, first, count)).sum() /
         static_cast<double>(tokens);
}

absl::StatusOr<std::unique_ptr<lightning::Optimizer>> GptModel::ConfigureOptimizers() {
  // The mesh members of the TP build, or the trainables of the module as the
  // strategy left it (fsdp: the shards).
  absl::StatusOr<std::unique_ptr<lightning::Optimizer>> made;
  if (const auto* sgd = std::get_if<lightning::SgdOptions>(&optimizer_options_)) {
    if (tensor_parallel()) {
      made = tp::MeshSgdOptimizer::Create(tp::TrainableMeshMembers(*this), *sgd);
    } else {
      made = lightning::Sgd::Create(lightning::TrainablesOf(*this), *sgd);
    }
  } else {
    const auto& adam = std::get<tp::AdamWOptions>(optimizer_options_);
    if (tensor_parallel()) {
      made = tp::MeshAdamWOptimizer::Create(tp::TrainableMeshMembers(*this), adam);
    } else {
      made = GptAdamW::Create(lightning::TrainablesOf(*this), adam);
    }
  }
  if (made.ok()) optimizer_ = made->get();
  return made;
}

at::Tensor GptModel::TokenLosses(const at::Tensor& ids, const at::Tensor& targets) {
  const absl::Status materialized = lightning::CheckMaterialized(*this);
  TORCH_CHECK(materialized.ok(), materialized.message());
  const int64_t batch = ids.size(0), t = ids.size(1);
  const int64_t head_dim = options_.dim / options_.heads;
  const int64_t local_heads = options_.heads / (tensor_parallel() ? tp_.tp_size() : 1);
  at::Tensor x = tok_(ids) + positions_().narrow(0, 0, t);
  const at::Tensor causal = at::ones({t, t}, at::kBool).triu(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  // [B, T, local heads * head_dim] -> [B, local heads, T, head_dim].
  auto heads = [&](const at::Tensor& y) { return y.view({batch, t, local_heads, head_dim}).transpose(1, 2); };
  for (const auto& b : blocks_) {
    // The block is an FSDP unit (FsdpUnits): its parameters are read only
    // inside this call (a plain forward under every other strategy).
    x = lightning::RunFsdpUnit(*b, [&] {
      const at::Tensor h = b->ln1(x);
      const at::Tensor q = heads(b->q(h)), k = heads(b->k(h)), v = heads(b->v(h));
      const at::Tensor scores =
          at::matmul(q, k.transpose(-2, -1)).mul(scale).masked_fill(causal, -std::numeric_limits<float>::infinity());
      const at::Tensor attended =
          at::matmul(at::softmax(scores, -1), v).transpose(1, 2).reshape({batch, t, local_heads * head_dim});
      const at::Tensor y = x + b->attn_proj(attended);
      return y + b->mlp_proj(at::gelu(b->fc(b->ln2(y))));
    });
  }
  const at::Tensor logits = head_(ln_f_(x));  // [B, T, local vocab]
  return loss_(logits.reshape({batch * t, logits.size(-1)}), targets.reshape({-1})).view({batch, t});
}

}  // namespace shardlight::simulate
