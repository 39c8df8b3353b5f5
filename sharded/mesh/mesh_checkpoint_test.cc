// Mesh-tensor checkpoints: saved on one random mesh and placements, loaded on
// another (any world size), into a ShardedTensor and into a dense tensor,
// always equal to the dense reference; replicas written once, spread.
#include "sharded/mesh/mesh_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/factories.h"
#include "sharded/mesh/mesh_testing.h"
#include "sharded/state_dict.h"
#include "sharded/test_layouts.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded::mesh {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;
using sharded::testing::ReferenceTensor;
using testing::ContextOf;
using testing::LocalPieceOf;
using testing::TestDir;
using testing::WithoutPartial;

constexpr int kCases = 40;

SimulatedCluster& ClusterOf(int w) {
  static auto* clusters = new std::map<int, std::unique_ptr<SimulatedCluster>>();
  auto& c = (*clusters)[w];
  if (!c) {
    simulate::ClusterOptions o;
    o.collective_timeout = std::chrono::seconds(20);
    c = std::make_unique<SimulatedCluster>(w, o);
  }
  return *c;
}

// Saves `reference` laid out by `placements` on a `shape` mesh of `w` ranks.
absl::Status Save(const at::Tensor& reference, int w, const std::vector<int64_t>& shape, const Placements& placements,
                  const std::string& dir) {
  return ClusterOf(w).Run([&](RankContext& ctx) -> absl::Status {
    auto mesh = DeviceMesh::Create(ContextOf(ctx), shape);
    if (!mesh.ok()) return mesh.status();
    auto t = MeshTensor::FromLocal(LocalPieceOf(reference, **mesh, placements), *mesh, placements,
                                   reference.sizes().vec());
    if (!t.ok()) return t.status();
    auto values = t->Redistribute(WithoutPartial(placements));
    if (!values.ok()) return values.status();
    auto view = ViewForSave(*values);
    if (!view.ok()) return view.status();
    StateDict sd;
    if (absl::Status s = sd.Insert("layer.w", *view); !s.ok()) return s;
    return checkpoint::SaveCheckpoint(sd, dir, *ctx.pg);
  });
}

// Loads `dir` into a mesh tensor on a `shape` mesh of `w` ranks and checks it.
absl::Status LoadAndCheck(const at::Tensor& reference, int w, const std::vector<int64_t>& shape,
                          const Placements& placements, const std::string& dir) {
  return ClusterOf(w).Run([&](RankContext& ctx) -> absl::Status {
    auto mesh = DeviceMesh::Create(ContextOf(ctx), shape);
    if (!mesh.ok()) return mesh.status();
    MeshFactoryOptions o;
    o.dtype = reference.scalar_type();
    auto t = MeshFactory(*mesh, placements, reference.sizes().vec(), o);
    if (!t.ok()) return t.status();
    auto view = ViewForLoad(*t);
    if (!view.ok()) return view.status();
    StateDict sd;
    if (absl::Status s = sd.Insert("layer.w", *view); !s.ok()) return s;
    if (absl::Status s = checkpoint::LoadCheckpoint(sd, dir, *ctx.pg); !s.ok()) return s;
    if (absl::Status s = CompleteLoad(*t); !s.ok()) return s;
    auto full = t->FullTensor();
    if (!full.ok()) return full.status();
    if (!at::equal(*full, reference)) return absl::InternalError("loaded mesh tensor differs from the reference");
    if (WithoutPartial(placements) == placements &&
        !at::equal(t->local(), LocalPieceOf(reference, **mesh, placements))) {
      return absl::InternalError("loaded local piece differs from the reference");
    }
    return absl::OkStatus();
  });
}

TEST(MeshCheckpointTest, RandomLayoutsSaveAndLoadAcrossMeshes) {
  std::mt19937_64 rng(4242);
  const c10::ScalarType dtypes[] = {at::kFloat, at::kDouble, at::kLong};
  for (int i = 0; i < kCases; ++i) {
    const int w1 = 1 + static_cast<int>(rng() % 8);
    const int w2 = 1 + static_cast<int>(rng() % 8);
    const auto shape1 = testing::RandomMeshShape(rng, w1);
    const auto shape2 = testing::RandomMeshShape(rng, w2);
    const auto sizes = testing::RandomSizes(rng);
    const c10::ScalarType dtype = dtypes[rng() % 3];
    const Placements a = testing::RandomPlacements(rng, shape1.size(), sizes.size(), true);
    const Placements b = testing::RandomPlacements(rng, shape2.size(), sizes.size(), true);
    const std::string what = absl::StrCat("case ", i, ": [", absl::StrJoin(sizes, ","), "] ", c10::toString(dtype),
                                          " saved on ", absl::StrJoin(shape1, "x"), " ", PlacementsString(a),
                                          ", loaded on ", absl::StrJoin(shape2, "x"), " ", PlacementsString(b));
    const at::Tensor reference = ReferenceTensor(sizes, dtype);
    const std::string dir = TestDir(absl::StrCat("random", i));
    ASSERT_TRUE(Save(reference, w1, shape1, a, dir).ok()) << what;
    absl::Status loaded = LoadAndCheck(reference, w2, shape2, b, dir);
    ASSERT_TRUE(loaded.ok()) << what << ": " << loaded;
    // The same checkpoint into a ShardedTensor (chunks along a dim) and dense.
    const int64_t chunk_dim = sizes.empty() ? 0 : static_cast<int64_t>(rng() % sizes.size());
    absl::Status other = ClusterOf(w2).Run([&](RankContext& ctx) -> absl::Status {
      StateDict sd;
      TensorProperties props;
      props.dtype = dtype;
      std::optional<ShardedTensor> st;
      if (!sizes.empty()) {
        auto z = Zeros(ChunkShardingSpec::OnRanks(chunk_dim, w2), sizes, {dtype, false}, ctx.pg);
        if (!z.ok()) return z.status();
        st = *z;
        if (absl::Status s = sd.Insert("layer.w", *st); !s.ok()) return s;
        if (absl::Status s = checkpoint::LoadCheckpoint(sd, dir, *ctx.pg); !s.ok()) return s;
        auto full = st->FullTensor();
        if (!full.ok()) return full.status();
        if (!at::equal(*full, reference)) return absl::InternalError("ShardedTensor differs");
      }
      StateDict dense;
      at::Tensor d = at::zeros(sizes, at::TensorOptions().dtype(dtype));
      if (absl::Status s = dense.Insert("layer.w", d); !s.ok()) return s;
      if (absl::Status s = checkpoint::LoadCheckpoint(dense, dir, *ctx.pg); !s.ok()) return s;
      if (!at::equal(d, reference)) return absl::InternalError("dense tensor differs");
      return absl::OkStatus();
    });
    ASSERT_TRUE(other.ok()) << what << ": " << other;
  }
}

// FSDP x TP: saved on 2 x 4 with Shard(0) x Shard(1), loaded on 1 x 3 and 4 x 1.
TEST(MeshCheckpointTest, TwoByFourLoadsOnOneByThreeAndFourByOne) {
  const at::Tensor reference = ReferenceTensor({10, 7}, at::kFloat);
  const std::string dir = TestDir("fsdp_tp");
  const auto S = [](int64_t d) { return MeshPlacement::Shard(d); };
  ASSERT_TRUE(Save(reference, 8, {2, 4}, {S(0), S(1)}, dir).ok());
  absl::Status a = LoadAndCheck(reference, 3, {1, 3}, {MeshPlacement::Replicate(), S(1)}, dir);
  EXPECT_TRUE(a.ok()) << a;
  absl::Status b = LoadAndCheck(reference, 4, {4, 1}, {S(1), MeshPlacement::Partial()}, dir);
  EXPECT_TRUE(b.ok()) << b;
}

// Replicas are written once, by owners spread over the replica ranks.
TEST(MeshCheckpointTest, ReplicasWrittenOnceAndSpread) {
  auto out = ClusterOf(8).Run([&](RankContext& ctx) -> absl::StatusOr<std::pair<std::string, int64_t>> {
    auto mesh = DeviceMesh::Create(ContextOf(ctx), {2, 4});
    if (!mesh.ok()) return mesh.status();
    MeshFactoryOptions o;
    o.init = MeshInit::kOnes;
    auto t = MeshFactory(*mesh, {MeshPlacement::Replicate(), MeshPlacement::Shard(1)}, {4, 8}, o);
    if (!t.ok()) return t.status();
    auto view = ViewForSave(*t);
    if (!view.ok()) return view.status();
    std::vector<std::string> owners;
    for (const auto& s : view->metadata().shards) owners.push_back(std::to_string(s.placement.rank));
    StateDict sd;
    if (absl::Status s = sd.Insert("w", *view); !s.ok()) return s;
    checkpoint::SaveStats stats;
    if (absl::Status s = checkpoint::SaveCheckpoint(sd, TestDir("spread"), *ctx.pg, {}, &stats); !s.ok()) return s;
    return std::make_pair(absl::StrJoin(owners, ","), stats.bytes_written);
  });
  ASSERT_TRUE(out.ok()) << out.status();
  // One shard per distinct box (4 column blocks of 4 x 2); block k has
  // replicas {k, k + 4} and owner k mod 2 of them: both rows write.
  int64_t most_by_a_non_owner = 0;
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ((*out)[r].first, "0,5,2,7");
    const bool owner = r == 0 || r == 5 || r == 2 || r == 7;
    if (!owner) most_by_a_non_owner = std::max(most_by_a_non_owner, (*out)[r].second);
  }
  // Non-owners write a data file without tensor bytes; owners add 32 bytes.
  for (int r : {0, 5, 2, 7}) EXPECT_GE((*out)[r].second, most_by_a_non_owner + 32) << "rank " << r;
}

TEST(MeshCheckpointTest, PartialMustBeReducedBeforeSaving) {
  auto out = ClusterOf(2).Run([&](RankContext& ctx) -> absl::Status {
    auto mesh = DeviceMesh::Create(ContextOf(ctx), {2});
    if (!mesh.ok()) return mesh.status();
    auto t = MeshFactory(*mesh, {MeshPlacement::Partial()}, {3}, {});
    if (!t.ok()) return t.status();
    return ViewForSave(*t).status();
  });
  EXPECT_EQ(out.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(out.message(), ::testing::HasSubstr("Redistribute it to Replicate"));
}

}  // namespace
}  // namespace shardlight::sharded::mesh
