// The TP layers against their dense equivalents on thread-ranks: a small
// network (vocab-parallel embedding, column- and row-parallel linear, layer
// norm, a column-parallel head and the tied head, vocab-parallel
// cross-entropy) at TP = 1..4 and DP x TP meshes, with sizes that split
// unevenly (hidden 5 and vocabulary 5 over 4 ranks: 2, 2, 1, 0). Loss,
// every parameter's gradient (after the data-parallel reduction), the global
// gradient norm, clipping and AdamW equal the dense computation's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lightning/tp/layer_norm.h"
#include "lightning/tp/mesh_adamw.h"
#include "lightning/tp/mesh_gradients.h"
#include "lightning/tp/parallel_linear.h"
#include "lightning/tp/tp_collectives.h"
#include "lightning/tp/vocab_parallel_cross_entropy.h"
#include "lightning/tp/vocab_parallel_embedding.h"
#include "sharded/mesh/mesh_testing.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning::tp {
namespace {

using ::testing::HasSubstr;
using sharded::mesh::DeviceMesh;
using sharded::mesh::MeshPtr;
using sharded::mesh::MeshTensor;
using simulate::RankContext;
using simulate::SimulatedCluster;

constexpr int64_t kVocab = 5, kDim = 6, kHidden = 5, kTokens = 8;

// The network: emb -> column(gelu) -> row -> +residual -> norm -> head and tied head.
struct Net : public ShardedModule {
  Net() : ShardedModule("Net") {}
  std::shared_ptr<VocabParallelEmbedding> emb;
  std::shared_ptr<ColumnParallelLinear> up, head;
  std::shared_ptr<RowParallelLinear> down;
  std::shared_ptr<ReplicatedLayerNorm> norm;
  TpMesh tp;
};

absl::StatusOr<std::shared_ptr<Net>> MakeNet(const TpMesh& tp) {
  auto net = std::make_shared<Net>();
  net->tp = tp;
  SL_ASSIGN_OR_RETURN(net->emb, VocabParallelEmbedding::Create(tp, {kVocab, kDim, 0.5, 11}));
  SL_ASSIGN_OR_RETURN(net->up, ColumnParallelLinear::Create(tp, {kDim, kHidden, true, 0.5, 12}));
  SL_ASSIGN_OR_RETURN(net->down, RowParallelLinear::Create(tp, {kHidden, kDim, true, 0.5, 13}));
  SL_ASSIGN_OR_RETURN(net->norm, ReplicatedLayerNorm::Create(tp, kDim));
  SL_ASSIGN_OR_RETURN(net->head, ColumnParallelLinear::Create(tp, {kDim, kVocab, false, 0.5, 14}));
  {
    // Non-trivial biases and norm parameters (the defaults are 0 and 1).
    at::NoGradGuard no_grad;
    net->up->mesh_tensor("bias")->local().add_(0.1);
    net->down->mesh_tensor("bias")->local().add_(-0.2);
    net->norm->mesh_tensor("weight")->local().mul_(1.5);
  }
  net->register_module("emb", net->emb);
  net->register_module("up", net->up);
  net->register_module("down", net->down);
  net->register_module("norm", net->norm);
  net->register_module("head", net->head);
  return net;
}

// Global batch: token ids and targets; DP rank d takes its torch.chunk.
at::Tensor Ids() { return at::tensor({0, 4, 2, 1, 3, 4, 0, 2}, at::kLong); }
at::Tensor Targets() { return at::tensor({4, 1, 0, 3, 2, 2, 4, 1}, at::kLong); }

// This rank's share of the global loss (sum over its tokens / all tokens).
at::Tensor NetLoss(Net& net, const at::Tensor& ids, const at::Tensor& targets) {
  at::Tensor x = net.emb->Forward(ids);
  x = x + net.down->Forward(at::gelu(net.up->Forward(x)));
  x = net.norm->Forward(x);
  c10d::ProcessGroup& g = net.tp.tp_group();
  at::Tensor loss = VocabParallelCrossEntropy(net.head->Forward(x), targets, net.emb->vocab_start(), g).sum();
  loss = loss + VocabParallelCrossEntropy(net.emb->Logits(x), targets, net.emb->vocab_start(), g).sum();
  return loss / kTokens;
}

// The same network densely, from full weights keyed like the mesh members.
at::Tensor DenseLoss(const std::map<std::string, at::Tensor>& w, const at::Tensor& ids, const at::Tensor& targets) {
  at::Tensor x = at::embedding(w.at("emb.weight"), ids);
  x = x + at::linear(at::gelu(at::linear(x, w.at("up.weight"), w.at("up.bias"))), w.at("down.weight"),
                     w.at("down.bias"));
  x = at::layer_norm(x, {kDim}, w.at("norm.weight"), w.at("norm.bias"));
  at::Tensor loss = at::cross_entropy_loss(at::linear(x, w.at("head.weight")), targets, {}, at::Reduction::Sum);
  loss = loss + at::cross_entropy_loss(at::matmul(x, w.at("emb.weight").t()), targets, {}, at::Reduction::Sum);
  return loss / kTokens;
}

// This rank's piece of a full tensor laid out like `param`.
at::Tensor LocalOf(const TpMesh& tp, const MeshTensor& param, const at::Tensor& full) {
  if (!IsTpSharded(tp, param)) return full;
  const int64_t d = param.placements()[tp.tp_dim].dim;
  const auto [start, length] = tp.LocalRange(full.size(d));
  return full.narrow(d, start, length);
}

MeshParams ParamsOf(Net& net) {
  MeshParams params;
  for (auto& [key, m] : MeshMembers(net, "")) params.emplace_back(key, m);
  return params;
}

struct Case {
  std::vector<int64_t> shape;  // DP x TP
};

class TpLayersTest : public ::testing::TestWithParam<Case> {};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return absl::StrCat("dp", info.param.shape[0], "_tp", info.param.shape[1]);
}

TEST_P(TpLayersTest, LossGradientsNormAndAdamWMatchDense) {
  const std::vector<int64_t> shape = GetParam().shape;
  const int world = static_cast<int>(shape[0] * shape[1]);
  SimulatedCluster cluster(world);
  const absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    SL_ASSIGN_OR_RETURN(MeshPtr mesh, DeviceMesh::Create(sharded::mesh::testing::ContextOf(ctx), shape, "tp"));
    SL_ASSIGN_OR_RETURN(TpMesh tp, TpMesh::Of(mesh, 1));
    SL_ASSIGN_OR_RETURN(std::shared_ptr<Net> net, MakeNet(tp));
    const MeshParams params = ParamsOf(*net);
    // Dense reference from the full weights.
    std::map<std::string, at::Tensor> full;
    for (const auto& [key, p] : params) {
      SL_ASSIGN_OR_RETURN(at::Tensor f, p->FullTensor());
      full[key] = f.detach().clone().requires_grad_(true);
    }
    const at::Tensor dense_loss = DenseLoss(full, Ids(), Targets());
    dense_loss.backward();

    const auto [row0, rows] = sharded::ChunkRanges(kTokens, shape[0])[mesh->coords()[0]];
    at::Tensor loss = NetLoss(*net, Ids().narrow(0, row0, rows), Targets().narrow(0, row0, rows));
    loss.backward();
    // The global loss: the DP ranks' shares summed.
    at::Tensor global = loss.detach().reshape({1}).clone();
    AllreduceInPlace(global, *mesh->group(0));
    EXPECT_NEAR(global.item<double>(), dense_loss.item<double>(), 1e-5);
    SL_RETURN_IF_ERROR(AllreduceDataParallelGrads(tp, params));
    double dense_sq = 0;
    for (const auto& [key, p] : params) {
      const at::Tensor want = LocalOf(tp, *p, full[key].grad());
      EXPECT_TRUE(at::allclose(p->local().grad(), want, 1e-4, 1e-6))
          << key << " on rank " << ctx.rank << ": " << p->local().grad() << " vs " << want;
      dense_sq += full[key].grad().to(at::kDouble).pow(2).sum().item<double>();
    }
    SL_ASSIGN_OR_RETURN(const double norm, GlobalGradNorm(tp, params));
    EXPECT_NEAR(norm, std::sqrt(dense_sq), 1e-5 * std::sqrt(dense_sq));
    // Clipping to half the norm halves every gradient.
    SL_ASSIGN_OR_RETURN(const double before, ClipGradNorm(tp, params, norm / 2));
    EXPECT_DOUBLE_EQ(before, norm);
    SL_ASSIGN_OR_RETURN(const double after, GlobalGradNorm(tp, params));
    EXPECT_NEAR(after, norm / 2, 1e-5 * norm);

    // AdamW: two steps against torch::optim::AdamW on the dense weights.
    AdamWOptions adam_options{0.01, 0.9, 0.95, 1e-8, 0.1};
    SL_ASSIGN_OR_RETURN(std::unique_ptr<MeshAdamW> adam, MeshAdamW::Create(params, adam_options));
    std::vector<at::Tensor> decayed, plain;
    for (const auto& [key, p] : params) {
      full[key].mutable_grad() = full[key].grad() * (before > 0 ? std::min(1.0, (norm / 2) / (norm + 1e-6)) : 1.0);
      (full[key].dim() >= 2 ? decayed : plain).push_back(full[key]);
    }
    torch::optim::AdamWOptions o(adam_options.lr);
    o.betas({adam_options.beta1, adam_options.beta2}).eps(adam_options.eps).weight_decay(adam_options.weight_decay);
    torch::optim::AdamWOptions o_plain = o;
    o_plain.weight_decay(0);
    torch::optim::AdamW reference(
        std::vector<torch::optim::OptimizerParamGroup>{
            torch::optim::OptimizerParamGroup(decayed, std::make_unique<torch::optim::AdamWOptions>(o)),
            torch::optim::OptimizerParamGroup(plain, std::make_unique<torch::optim::AdamWOptions>(o_plain))},
        o);
    for (int s = 0; s < 2; ++s) {
      adam->Step();
      reference.step();
    }
    EXPECT_EQ(adam->steps(), 2);
    for (const auto& [key, p] : params) {
      const at::Tensor want = LocalOf(tp, *p, full[key].detach());
      EXPECT_TRUE(at::allclose(p->local().detach(), want, 1e-5, 1e-6)) << key << " after AdamW on rank " << ctx.rank;
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(Meshes, TpLayersTest,
                         ::testing::Values(Case{{1, 1}}, Case{{1, 2}}, Case{{1, 3}}, Case{{1, 4}}, Case{{2, 2}},
                                           Case{{2, 1}}),
                         CaseName);

TEST(TpLayersBadInputTest, VocabularySmallerThanTpFailsOnEveryRank) {
  SimulatedCluster cluster(4);
  std::vector<std::string> errors(4);
  const absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    SL_ASSIGN_OR_RETURN(MeshPtr mesh, DeviceMesh::Create(sharded::mesh::testing::ContextOf(ctx), {1, 4}, "tp"));
    SL_ASSIGN_OR_RETURN(TpMesh tp, TpMesh::Of(mesh, 1));
    auto emb = VocabParallelEmbedding::Create(tp, {3, kDim, 0.02, 1});
    errors[ctx.rank] = emb.ok() ? "ok" : std::string(emb.status().message());
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  for (const std::string& e : errors) EXPECT_THAT(e, HasSubstr("a vocabulary of 3 cannot be split over 4"));
}

TEST(TpLayersBadInputTest, BadSizesAndDims) {
  SimulatedCluster cluster(2);
  const absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    SL_ASSIGN_OR_RETURN(MeshPtr mesh, DeviceMesh::Create(sharded::mesh::testing::ContextOf(ctx), {1, 2}, "tp"));
    EXPECT_THAT(TpMesh::Of(mesh, 2).status().message(), HasSubstr("dim 2 is not a dim of the 1x2 mesh"));
    SL_ASSIGN_OR_RETURN(TpMesh tp, TpMesh::Of(mesh, 1));
    EXPECT_THAT(ColumnParallelLinear::Create(tp, {0, 4}).status().message(), HasSubstr("must be >= 1"));
    EXPECT_THAT(RowParallelLinear::Create(tp, {4, 0}).status().message(), HasSubstr("must be >= 1"));
    EXPECT_THAT(MeshAdamW::Create({}, {-1.0}).status().message(), HasSubstr("out of range"));
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace shardlight::lightning::tp
