// Mesh tensors as members of a LightningModule tree: StateDictOf carries them
// as checkpoint views and LoadStateDict fills them, from a checkpoint saved on
// another mesh (any world size), from another module's state dict (reshard),
// and from dense tensors -- always the dense reference's values; bad input
// fails on every rank naming the key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lightning/lightning_module.h"
#include "lightning/state_dict_hooks.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/mesh/mesh_testing.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning {
namespace {

using ::testing::HasSubstr;
using sharded::mesh::DeviceMesh;
using sharded::mesh::MeshPlacement;
using sharded::mesh::MeshPtr;
using sharded::mesh::MeshTensor;
using sharded::mesh::Placements;
using simulate::RankContext;
using simulate::SimulatedCluster;
using sharded::mesh::testing::TestDir;
using sharded::mesh::testing::WithoutPartial;

constexpr int kCases = 16;

// The references: "w" on the root, "block.v" on a child ShardedModule.
struct References {
  at::Tensor w, v;
};

References MakeReferences(std::mt19937_64& rng) {
  const auto sizes_w = sharded::mesh::testing::RandomSizes(rng);
  const auto sizes_v = sharded::mesh::testing::RandomSizes(rng);
  const int64_t offset = static_cast<int64_t>(rng() % 1000);
  // Small distinct integers: exact in float and double.
  auto values = [&](const std::vector<int64_t>& sizes, c10::ScalarType dtype) {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return ((at::arange(n, at::kLong) * 7 + offset) % 101 - 50).to(dtype).reshape(sizes);
  };
  return {values(sizes_w, at::kDouble), values(sizes_v, at::kFloat)};
}

struct Layout {
  std::vector<int64_t> shape;
  Placements w, v;
};

Layout RandomLayout(std::mt19937_64& rng, int world_size, const References& refs, bool allow_partial) {
  Layout l;
  l.shape = sharded::mesh::testing::RandomMeshShape(rng, world_size);
  const int dims = static_cast<int>(l.shape.size());
  l.w = sharded::mesh::testing::RandomPlacements(rng, dims, static_cast<int>(refs.w.dim()), allow_partial);
  l.v = sharded::mesh::testing::RandomPlacements(rng, dims, static_cast<int>(refs.v.dim()), allow_partial);
  return l;
}

class MeshModule : public LightningModule {
 public:
  MeshModule() : LightningModule("MeshModule") {
    block = register_module("block", std::make_shared<ShardedModule>("Block"));
  }
  std::shared_ptr<ShardedModule> block;
};

// A module whose members hold `refs` (or zeros) laid out by `layout`.
absl::StatusOr<std::shared_ptr<MeshModule>> MakeModule(const MeshPtr& mesh, const Layout& layout,
                                                       const References& refs, bool zeros) {
  auto module = std::make_shared<MeshModule>();
  auto piece = [&](const at::Tensor& full, const Placements& p) {
    at::Tensor local = sharded::mesh::testing::LocalPieceOf(full, *mesh, p);
    return zeros ? at::zeros_like(local) : local;
  };
  SL_ASSIGN_OR_RETURN(MeshTensor w, MeshTensor::FromLocal(piece(refs.w, layout.w), mesh, layout.w, refs.w.sizes().vec()));
  SL_ASSIGN_OR_RETURN(MeshTensor v, MeshTensor::FromLocal(piece(refs.v, layout.v), mesh, layout.v, refs.v.sizes().vec()));
  SL_RETURN_IF_ERROR(module->RegisterMeshTensor("w", std::move(w)));
  SL_RETURN_IF_ERROR(module->block->RegisterMeshTensor("v", std::move(v)));
  return module;
}

absl::Status CheckValues(MeshModule& module, const References& refs) {
  SL_ASSIGN_OR_RETURN(at::Tensor w, module.mesh_tensor("w")->FullTensor());
  SL_ASSIGN_OR_RETURN(at::Tensor v, module.block->mesh_tensor("v")->FullTensor());
  if (!at::equal(w, refs.w)) return absl::InternalError("member w differs from its reference");
  if (!at::equal(v, refs.v)) return absl::InternalError("member block.v differs from its reference");
  return absl::OkStatus();
}

absl::Status SaveModule(const References& refs, const Layout& layout, const std::string& dir, RankContext& ctx) {
  SL_ASSIGN_OR_RETURN(MeshPtr mesh, DeviceMesh::Create(sharded::mesh::testing::ContextOf(ctx), layout.shape, "save"));
  SL_ASSIGN_OR_RETURN(auto module, MakeModule(mesh, layout, refs, /*zeros=*/false));
  SL_ASSIGN_OR_RETURN(StateDict dict, StateDictOf(*module));
  if (dict.size() != 2 || dict.Find("w") == nullptr || dict.Find("block.v") == nullptr) {
    return absl::InternalError("the state dict does not hold exactly the keys w and block.v");
  }
  return sharded::checkpoint::SaveCheckpoint(dict, dir, *ctx.pg);
}

// As the Trainer resumes: fresh tensors of the module's layout, filled from
// the checkpoint, reach the module through LoadStateDict.
absl::Status LoadModuleFromCheckpoint(const References& refs, const Layout& layout, const std::string& dir,
                                      RankContext& ctx) {
  SL_ASSIGN_OR_RETURN(MeshPtr mesh, DeviceMesh::Create(sharded::mesh::testing::ContextOf(ctx), layout.shape, "load"));
  SL_ASSIGN_OR_RETURN(auto module, MakeModule(mesh, layout, refs, /*zeros=*/true));
  // A Partial member is not saveable; its layout as Replicate gives the view.
  SL_ASSIGN_OR_RETURN(auto twin, MakeModule(mesh, Layout{layout.shape, WithoutPartial(layout.w),
                                                          WithoutPartial(layout.v)},
                                            refs, /*zeros=*/true));
  SL_ASSIGN_OR_RETURN(StateDict current, StateDictOf(*twin));
  // Only the views' layouts matter: each is loaded, then resharded if needed.
  StateDict fresh;
  for (const auto& [key, value] : current.entries()) {
    SL_RETURN_IF_ERROR(fresh.Insert(key, std::get<sharded::ShardedTensor>(value).ZerosLike(false)));
  }
  SL_RETURN_IF_ERROR(sharded::checkpoint::LoadCheckpoint(fresh, dir, *ctx.pg));
  SL_RETURN_IF_ERROR(LoadStateDict(*module, std::move(fresh), /*strict=*/true).status());
  return CheckValues(*module, refs);
}

TEST(MeshMembersTest, CheckpointOfModuleLoadsOnAnyMeshAndPlacements) {
  std::mt19937_64 rng(1717);
  simulate::ClusterOptions options;
  options.collective_timeout = std::chrono::seconds(20);
  for (int i = 0; i < kCases; ++i) {
    const References refs = MakeReferences(rng);
    const int w1 = 1 + static_cast<int>(rng() % 6), w2 = 1 + static_cast<int>(rng() % 6);
    const Layout from = RandomLayout(rng, w1, refs, /*allow_partial=*/false);
    const Layout to = RandomLayout(rng, w2, refs, /*allow_partial=*/true);
    const std::string dir = TestDir(absl::StrCat("mesh_members_", i));
    SCOPED_TRACE(absl::StrCat("case ", i, ": ", w1, " ranks ", absl::StrJoin(from.shape, "x"), " w ",
                              sharded::mesh::PlacementsString(from.w), " -> ", w2, " ranks ",
                              absl::StrJoin(to.shape, "x"), " w ", sharded::mesh::PlacementsString(to.w),
                              "; w sizes [", absl::StrJoin(refs.w.sizes(), ","), "]"));
    SimulatedCluster saver(w1, options);
    ASSERT_TRUE(saver.Run([&](RankContext& ctx) { return SaveModule(refs, from, dir, ctx); }).ok());
    SimulatedCluster loader(w2, options);
    absl::Status loaded = loader.Run([&](RankContext& ctx) { return LoadModuleFromCheckpoint(refs, to, dir, ctx); });
    EXPECT_TRUE(loaded.ok()) << loaded;
  }
}

// Without a checkpoint: another module's state dict on the same ranks
// (resharded when the layouts differ), and a dense consolidated dict.
TEST(MeshMembersTest, LoadsFromAnotherModuleAndFromDenseTensors) {
  std::mt19937_64 rng(99);
  for (int world_size : {1, 3, 4, 6}) {
    SimulatedCluster cluster(world_size);
    for (int i = 0; i < 4; ++i) {
      const References refs = MakeReferences(rng);
      const Layout from = RandomLayout(rng, world_size, refs, /*allow_partial=*/false);
      const Layout to = RandomLayout(rng, world_size, refs, /*allow_partial=*/true);
      absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
        auto mctx = sharded::mesh::testing::ContextOf(ctx);
        SL_ASSIGN_OR_RETURN(MeshPtr mesh_from, DeviceMesh::Create(mctx, from.shape, "from"));
        SL_ASSIGN_OR_RETURN(MeshPtr mesh_to, DeviceMesh::Create(mctx, to.shape, "to"));
        SL_ASSIGN_OR_RETURN(auto source, MakeModule(mesh_from, from, refs, /*zeros=*/false));
        SL_ASSIGN_OR_RETURN(auto target, MakeModule(mesh_to, to, refs, /*zeros=*/true));
        SL_ASSIGN_OR_RETURN(StateDict dict, StateDictOf(*source));
        SL_RETURN_IF_ERROR(LoadStateDict(*target, std::move(dict)).status());
        SL_RETURN_IF_ERROR(CheckValues(*target, refs));
        // Dense: every rank holds the full tensors.
        SL_ASSIGN_OR_RETURN(auto from_dense, MakeModule(mesh_to, to, refs, /*zeros=*/true));
        StateDict dense;
        SL_RETURN_IF_ERROR(dense.Insert("w", refs.w.clone()));
        SL_RETURN_IF_ERROR(dense.Insert("block.v", refs.v.clone()));
        SL_RETURN_IF_ERROR(LoadStateDict(*from_dense, std::move(dense)).status());
        return CheckValues(*from_dense, refs);
      });
      EXPECT_TRUE(status.ok()) << "world " << world_size << " case " << i << ": " << status;
    }
  }
}

// Each rank's error message, or "OK".
std::vector<std::string> Outcomes(int world_size, const std::function<absl::Status(RankContext&)>& body) {
  SimulatedCluster cluster(world_size);
  auto out = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::string> {
    absl::Status s = body(ctx);
    return s.ok() ? std::string("OK") : std::string(s.message());
  });
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<std::string>{};
}

TEST(MeshMembersTest, BadEntriesFailOnEveryRankNamingTheKeyAndChangeNothing) {
  References refs{at::arange(12, at::kDouble).reshape({3, 4}), at::arange(5, at::kFloat)};
  const Layout layout{{2, 2}, {MeshPlacement::Shard(0), MeshPlacement::Replicate()},
                      {MeshPlacement::Replicate(), MeshPlacement::Shard(0)}};
  auto outcomes = Outcomes(4, [&](RankContext& ctx) -> absl::Status {
    SL_ASSIGN_OR_RETURN(MeshPtr mesh, DeviceMesh::Create(sharded::mesh::testing::ContextOf(ctx), layout.shape));
    SL_ASSIGN_OR_RETURN(auto module, MakeModule(mesh, layout, refs, /*zeros=*/true));
    StateDict dict;
    SL_RETURN_IF_ERROR(dict.Insert("w", refs.w));
    // Rank 2's entry for block.v has the wrong size.
    SL_RETURN_IF_ERROR(dict.Insert("block.v", ctx.rank == 2 ? at::zeros({6}, at::kFloat) : refs.v));
    absl::Status loaded = LoadStateDict(*module, std::move(dict)).status();
    if (!at::equal(module->mesh_tensor("w")->local(), at::zeros_like(module->mesh_tensor("w")->local()))) {
      return absl::InternalError("a failed load changed member w");
    }
    return loaded;
  });
  ASSERT_EQ(outcomes.size(), 4u);
  for (const auto& o : outcomes) {
    EXPECT_EQ(o, outcomes[0]);
    EXPECT_THAT(o, HasSubstr("rank 2"));
    EXPECT_THAT(o, HasSubstr("block.v"));
  }
}

TEST(MeshMembersTest, MissingKeysAndPartialMembersAreReported) {
  References refs{at::arange(12, at::kDouble).reshape({3, 4}), at::arange(5, at::kFloat)};
  const Layout layout{{2}, {MeshPlacement::Shard(1)}, {MeshPlacement::Partial()}};
  auto outcomes = Outcomes(2, [&](RankContext& ctx) -> absl::Status {
    SL_ASSIGN_OR_RETURN(MeshPtr mesh, DeviceMesh::Create(sharded::mesh::testing::ContextOf(ctx), layout.shape));
    SL_ASSIGN_OR_RETURN(auto module, MakeModule(mesh, layout, refs, /*zeros=*/true));
    // Strict: the missing block.v is named.
    StateDict only_w;
    SL_RETURN_IF_ERROR(only_w.Insert("w", refs.w));
    absl::Status strict = LoadStateDict(*module, only_w).status();
    if (strict.ok() || !absl::StrContains(strict.message(), "missing keys: \"block.v\"")) {
      return absl::InternalError(absl::StrCat("strict load: ", strict.ToString()));
    }
    SL_ASSIGN_OR_RETURN(LoadReport report, LoadStateDict(*module, only_w, /*strict=*/false));
    if (report.missing_keys != std::vector<std::string>{"block.v"}) return absl::InternalError("missing keys");
    // The Partial member holds addends: the state dict refuses it by name.
    absl::Status saved = StateDictOf(*module).status();
    if (saved.code() != absl::StatusCode::kFailedPrecondition || !absl::StrContains(saved.message(), "block.v")) {
      return absl::InternalError(absl::StrCat("state dict of a Partial member: ", saved.ToString()));
    }
    // One name for one member, whichever its kind.
    absl::Status twice = module->RegisterMeshTensor("w", *module->mesh_tensor("w"));
    if (twice.code() != absl::StatusCode::kAlreadyExists) return absl::InternalError(twice.ToString());
    return absl::OkStatus();
  });
  for (const auto& o : outcomes) EXPECT_EQ(o, "OK");
}

}  // namespace
}  // namespace shardlight::lightning
