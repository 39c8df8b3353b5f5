// Device meshes and mesh tensors on the simulated cluster: random meshes
// (W = 1..8, 1-d to 3-d), placements and sizes through Redistribute and
// FullTensor against the dense reference; the same error on every rank for
// inconsistent input; bytes moved per transition.
#include "sharded/mesh/mesh_tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/factories.h"
#include "sharded/global_random.h"
#include "sharded/mesh/device_mesh.h"
#include "sharded/mesh/mesh_testing.h"
#include "sharded/test_layouts.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded::mesh {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;
using sharded::testing::ReferenceTensor;
using testing::ContextOf;
using testing::LocalPieceOf;
using testing::MeshCache;
using testing::RandomMeshShape;
using testing::RandomPlacements;
using testing::RandomSizes;

constexpr int kCasesPerWorldSize = 60;

simulate::ClusterOptions Options() {
  simulate::ClusterOptions o;
  o.collective_timeout = std::chrono::seconds(20);
  return o;
}

at::Tensor Region(const at::Tensor& full, const Box& box) {
  at::Tensor t = full;
  for (size_t d = 0; d < box.sizes.size(); ++d) t = t.narrow(d, box.offsets[d], box.sizes[d]);
  return t;
}

bool HasPartial(const Placements& p) {
  for (const auto& x : p) {
    if (x.is_partial()) return true;
  }
  return false;
}

class MeshPropertyTest : public ::testing::TestWithParam<int> {};

// Random layouts A -> B: the local piece under B is the reference's box
// (when B has no Partial), and FullTensor gives the reference on every rank.
TEST_P(MeshPropertyTest, RedistributeMatchesDense) {
  const int w = GetParam();
  SimulatedCluster cluster(w, Options());
  absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    std::mt19937_64 rng(7000 + w);  // identical draws on every rank
    MeshCache meshes(ContextOf(ctx));
    const c10::ScalarType dtypes[] = {at::kFloat, at::kDouble, at::kLong};
    for (int i = 0; i < kCasesPerWorldSize; ++i) {
      const std::vector<int64_t> shape = RandomMeshShape(rng, w);
      const std::vector<int64_t> sizes = RandomSizes(rng);
      const c10::ScalarType dtype = dtypes[rng() % 3];
      const Placements a = RandomPlacements(rng, shape.size(), sizes.size(), true);
      const Placements b = RandomPlacements(rng, shape.size(), sizes.size(), true);
      const std::string what = absl::StrCat("case ", i, ": mesh ", absl::StrJoin(shape, "x"), " sizes [",
                                            absl::StrJoin(sizes, ","), "] ", c10::toString(dtype), " ",
                                            PlacementsString(a), " -> ", PlacementsString(b));
      auto mesh = meshes.Get(shape);
      if (!mesh.ok()) return mesh.status();
      const at::Tensor reference = ReferenceTensor(sizes, dtype);
      auto src = MeshTensor::FromLocal(LocalPieceOf(reference, **mesh, a), *mesh, a, sizes);
      if (!src.ok()) return absl::InternalError(absl::StrCat(what, ": ", src.status().message()));
      auto dst = src->Redistribute(b);
      if (!dst.ok()) return absl::InternalError(absl::StrCat(what, ": ", dst.status().message()));
      if (dst->placements() != b) return absl::InternalError(absl::StrCat(what, ": wrong placements"));
      if (!HasPartial(b) && !at::equal(dst->local(), Region(reference, dst->LocalBox()))) {
        return absl::InternalError(absl::StrCat(what, ": local piece differs from the reference"));
      }
      auto full = dst->FullTensor();
      if (!full.ok()) return absl::InternalError(absl::StrCat(what, ": ", full.status().message()));
      if (!at::equal(*full, reference)) return absl::InternalError(absl::StrCat(what, ": full tensor differs"));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

// Random Partial-free layouts A -> B, nested sharding of one tensor dim by
// several mesh dims included: every rank receives exactly the elements of its
// new piece that it did not hold, and its piece is the reference's.
TEST_P(MeshPropertyTest, ValueTransitionsReceiveTheMinimum) {
  const int w = GetParam();
  SimulatedCluster cluster(w, Options());
  absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    std::mt19937_64 rng(8000 + w);
    MeshCache meshes(ContextOf(ctx));
    int nested = 0;
    for (int i = 0; i < 40; ++i) {
      const std::vector<int64_t> shape = RandomMeshShape(rng, w);
      // Larger sizes than RandomSizes: nested pieces are rarely all empty.
      std::vector<int64_t> sizes(1 + rng() % 2);
      for (auto& s : sizes) s = static_cast<int64_t>(rng() % 13);
      const Placements a = RandomPlacements(rng, shape.size(), sizes.size(), false);
      const Placements b = RandomPlacements(rng, shape.size(), sizes.size(), false);
      const std::string what = absl::StrCat("case ", i, ": mesh ", absl::StrJoin(shape, "x"), " sizes [",
                                            absl::StrJoin(sizes, ","), "] ", PlacementsString(a), " -> ",
                                            PlacementsString(b));
      for (size_t x = 0; x + 1 < a.size(); ++x) {
        for (size_t y = x + 1; y < a.size(); ++y) {
          nested += (a[x].is_shard() && a[y] == a[x]) || (b[x].is_shard() && b[y] == b[x]);
        }
      }
      auto mesh = meshes.Get(shape);
      if (!mesh.ok()) return mesh.status();
      const at::Tensor reference = ReferenceTensor(sizes, at::kFloat);
      auto src = MeshTensor::FromLocal(LocalPieceOf(reference, **mesh, a), *mesh, a, sizes);
      if (!src.ok()) return absl::InternalError(absl::StrCat(what, ": ", src.status().message()));
      RedistributeStats stats;
      auto dst = src->Redistribute(b, &stats);
      if (!dst.ok()) return absl::InternalError(absl::StrCat(what, ": ", dst.status().message()));
      if (!at::equal(dst->local(), Region(reference, dst->LocalBox()))) {
        return absl::InternalError(absl::StrCat(what, ": local piece differs from the reference"));
      }
      const std::optional<Box> kept = Intersect(src->LocalBox(), dst->LocalBox());
      const int64_t minimum = (dst->LocalBox().NumElements() - (kept ? kept->NumElements() : 0)) * 4;
      if (stats.bytes_received != minimum) {
        return absl::InternalError(absl::StrCat(what, ": rank ", ctx.rank, " received ", stats.bytes_received,
                                                " bytes, the minimum is ", minimum));
      }
    }
    if (w >= 4 && nested == 0) return absl::InternalError("no case had nested sharding");
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

// Random init by global index: the same full tensor on any mesh and placements.
TEST_P(MeshPropertyTest, RandomFactoriesIgnoreTheLayout) {
  const int w = GetParam();
  SimulatedCluster cluster(w, Options());
  absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    std::mt19937_64 rng(9000 + w);
    MeshCache meshes(ContextOf(ctx));
    for (int i = 0; i < 12; ++i) {
      const std::vector<int64_t> shape = RandomMeshShape(rng, w);
      const std::vector<int64_t> sizes = RandomSizes(rng);
      const Placements p = RandomPlacements(rng, shape.size(), sizes.size(), true);
      auto mesh = meshes.Get(shape);
      if (!mesh.ok()) return mesh.status();
      MeshFactoryOptions o;
      o.init = i % 2 ? MeshInit::kRandn : MeshInit::kRand;
      o.seed = 42;
      auto t = MeshFactory(*mesh, p, sizes, o);
      if (!t.ok()) return t.status();
      auto full = t->FullTensor();
      if (!full.ok()) return full.status();
      // The dense reference: the whole tensor filled as one box.
      at::Tensor expected = at::empty(sizes, at::kFloat);
      FillGlobalRandom(expected, std::vector<int64_t>(sizes.size(), 0), sizes, 42,
                       i % 2 ? RandomKind::kNormal : RandomKind::kUniform);
      // Partial(avg) of n equal values is their sum divided by n: rounded.
      const bool averaged = std::any_of(p.begin(), p.end(), [](const MeshPlacement& x) {
        return x.is_partial() && x.op == PartialOp::kAvg;
      });
      if (averaged ? !at::allclose(*full, expected, 1e-6, 1e-6) : !at::equal(*full, expected)) {
        return absl::InternalError(absl::StrCat("case ", i, " ", PlacementsString(p), " on ",
                                                absl::StrJoin(shape, "x"), ": values depend on the layout"));
      }
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, MeshPropertyTest, ::testing::Range(1, 9));

TEST(DeviceMeshTest, SubGroupsFollowRowMajorCoordinates) {
  SimulatedCluster cluster(8, Options());
  auto out = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::string> {
    auto mesh = DeviceMesh::Create(ContextOf(ctx), {2, 4});
    if (!mesh.ok()) return mesh.status();
    const DeviceMesh& m = **mesh;
    // The sum of world ranks over each sub-group tells which ranks it holds.
    std::string s = absl::StrJoin(m.coords(), ",");
    for (int d = 0; d < 2; ++d) {
      at::Tensor t = at::full({1}, static_cast<int64_t>(ctx.rank), at::kLong);
      std::vector<at::Tensor> v{t};
      m.group(d)->allreduce(v)->wait();
      absl::StrAppend(&s, " g", d, "=", t.item<int64_t>(), "/", m.group(d)->getSize());
    }
    if (m.RankAt(m.coords()) != ctx.rank) return absl::InternalError("RankAt(coords) != rank");
    return s;
  });
  ASSERT_TRUE(out.ok()) << out.status();
  // Rank 5 is (1, 1): its column (dim 0) is {1, 5}, its row (dim 1) {4..7}.
  EXPECT_EQ((*out)[5], "1,1 g0=6/2 g1=22/4");
  EXPECT_EQ((*out)[0], "0,0 g0=4/2 g1=6/4");
}

// A permuted view is the same ranks and groups with the dims reordered, and
// nests shards in its own dim order: Shard(0) on both dims of (tp, dp) is
// each TP piece chunked again over DP (FSDP x TP), unlike (dp, tp).
TEST(DeviceMeshTest, APermutedViewKeepsRanksAndGroupsAndNestsInItsOrder) {
  SimulatedCluster cluster(6, Options());
  const absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    auto made = DeviceMesh::Create(ContextOf(ctx), {2, 3}, "dp_tp");
    if (!made.ok()) return made.status();
    const DeviceMesh& m = **made;
    auto permuted = m.Permuted({1, 0});
    if (!permuted.ok()) return permuted.status();
    const DeviceMesh& p = **permuted;
    EXPECT_EQ(p.ShapeString(), "3x2");
    EXPECT_EQ(p.name(), "dp_tp(dims 1,0)");
    EXPECT_EQ(p.rank(), ctx.rank);
    EXPECT_EQ(p.coords(), (std::vector<int64_t>{m.coords()[1], m.coords()[0]}));
    EXPECT_EQ(p.group(0).get(), m.group(1).get());
    EXPECT_EQ(p.group(1).get(), m.group(0).get());
    for (int r = 0; r < 6; ++r) {
      const std::vector<int64_t> c = m.CoordsOf(r);
      EXPECT_EQ(p.CoordsOf(r), (std::vector<int64_t>{c[1], c[0]})) << r;
      EXPECT_EQ(p.RankAt(p.CoordsOf(r)), r);
    }
    // Rows 0..10 of an [11, 2] tensor: TP (3) takes 4,4,3 rows, then DP (2) chunks each piece.
    const Placements nested = {MeshPlacement::Shard(0), MeshPlacement::Shard(0)};
    const Box box = MeshLocalBox(p.shape(), p.coords(), nested, {11, 2});
    const int64_t tp_first[] = {0, 4, 8}, tp_rows[] = {4, 4, 3};
    const int64_t t = m.coords()[1], d = m.coords()[0];
    const int64_t dp_rows = (tp_rows[t] + 1) / 2;
    EXPECT_EQ(box.offsets[0], tp_first[t] + d * dp_rows) << ctx.rank;
    EXPECT_EQ(box.sizes[0], d == 0 ? dp_rows : tp_rows[t] - dp_rows) << ctx.rank;
    // A mesh tensor on the view: its full tensor is the reference, and a
    // piece wrapped without agreement keeps its variable.
    MeshFactoryOptions o;
    o.init = MeshInit::kRandn;
    o.seed = 7;
    auto x = MeshFactory(*permuted, nested, {11, 2}, o);
    if (!x.ok()) return x.status();
    auto full = x->FullTensor();
    if (!full.ok()) return full.status();
    at::Tensor want = at::empty({11, 2});
    FillGlobalRandom(want, {0, 0}, {11, 2}, 7, RandomKind::kNormal);
    EXPECT_TRUE(at::equal(*full, want));
    auto wrapped = MeshTensor::FromLocalAgreed(x->local(), *permuted, nested, {11, 2});
    if (!wrapped.ok()) return wrapped.status();
    EXPECT_TRUE(wrapped->local().is_same(x->local()));
    auto wrong = MeshTensor::FromLocalAgreed(at::zeros({7, 2}), *made, nested, {11, 2});  // no box has 7 rows
    EXPECT_FALSE(wrong.ok());
    EXPECT_THAT(std::string(wrong.status().message()), ::testing::HasSubstr("does not match its box"));
    auto bad = m.Permuted({0, 0});
    EXPECT_FALSE(bad.ok());
    EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("is not a permutation"));
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

// Every rank's error, for tests that check every rank reports the same one.
template <typename F>
std::vector<std::string> ErrorsOnEveryRank(int w, F&& body) {
  SimulatedCluster cluster(w, Options());
  auto out = cluster.Run([&](RankContext& ctx) -> std::string {
    absl::Status s = body(ctx);
    return s.ok() ? "OK" : std::string(s.message());
  });
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<std::string>{};
}

TEST(DeviceMeshTest, ParsesShapes) {
  EXPECT_THAT(*ParseMeshShape("2x4"), ::testing::ElementsAre(2, 4));
  EXPECT_THAT(*ParseMeshShape("3"), ::testing::ElementsAre(3));
  EXPECT_THAT(*ParseMeshShape("1x2x3"), ::testing::ElementsAre(1, 2, 3));
  for (const std::string bad : {"", "2x", "x2", "2x0", "2*2", "2x-1", "axb"}) {
    auto shape = ParseMeshShape(bad);
    ASSERT_FALSE(shape.ok()) << bad;
    EXPECT_THAT(std::string(shape.status().message()), ::testing::HasSubstr("mesh shape '" + bad + "'"));
  }
}

TEST(DeviceMeshTest, ShapeThatDoesNotMatchTheWorldFailsOnEveryRank) {
  auto errors = ErrorsOnEveryRank(4, [](RankContext& ctx) {
    return DeviceMesh::Create(ContextOf(ctx), {2, 3}).status();
  });
  ASSERT_EQ(errors.size(), 4u);
  for (const auto& e : errors) {
    EXPECT_EQ(e, errors[0]);
    EXPECT_THAT(e, ::testing::HasSubstr("device mesh 2x3 has 6 ranks but the world has 4"));
  }
}

TEST(DeviceMeshTest, RanksPassingDifferentShapesFailTogether) {
  auto errors = ErrorsOnEveryRank(4, [](RankContext& ctx) {
    const std::vector<int64_t> shape = ctx.rank == 3 ? std::vector<int64_t>{4, 1} : std::vector<int64_t>{2, 2};
    return DeviceMesh::Create(ContextOf(ctx), shape).status();
  });
  ASSERT_EQ(errors.size(), 4u);
  for (const auto& e : errors) {
    EXPECT_EQ(e, errors[0]);
    EXPECT_THAT(e, ::testing::HasSubstr("ranks disagree on the mesh shape: rank 0 and rank 3"));
  }
}

TEST(MeshTensorTest, InconsistentPlacementsFailTogether) {
  auto errors = ErrorsOnEveryRank(4, [](RankContext& ctx) -> absl::Status {
    auto mesh = DeviceMesh::Create(ContextOf(ctx), {2, 2});
    if (!mesh.ok()) return mesh.status();
    auto t = MeshFactory(*mesh, {MeshPlacement::Shard(0), MeshPlacement::Replicate()}, {6, 4}, {});
    if (!t.ok()) return t.status();
    Placements target = {MeshPlacement::Replicate(), MeshPlacement::Shard(ctx.rank == 2 ? 0 : 1)};
    return t->Redistribute(target).status();
  });
  ASSERT_EQ(errors.size(), 4u);
  for (const auto& e : errors) {
    EXPECT_EQ(e, errors[0]);
    EXPECT_THAT(e, ::testing::HasSubstr("ranks disagree on the source and target layouts: rank 0 and rank 2"));
  }
}

TEST(MeshTensorTest, BadPlacementOnOneRankNamesThatRank) {
  auto errors = ErrorsOnEveryRank(4, [](RankContext& ctx) -> absl::Status {
    auto mesh = DeviceMesh::Create(ContextOf(ctx), {2, 2});
    if (!mesh.ok()) return mesh.status();
    Placements p = {MeshPlacement::Shard(ctx.rank == 1 ? 5 : 0), MeshPlacement::Replicate()};
    return MeshFactory(*mesh, p, {6, 4}, {}).status();
  });
  ASSERT_EQ(errors.size(), 4u);
  for (const auto& e : errors) {
    EXPECT_EQ(e, errors[0]);
    EXPECT_THAT(e, ::testing::HasSubstr("failed on rank 1: placement Shard(5) is out of range"));
  }
}

TEST(MeshTensorTest, ShardedTensorRoundTrip) {
  SimulatedCluster cluster(3, Options());
  absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    auto mesh = DeviceMesh::Create(ContextOf(ctx), {3});
    if (!mesh.ok()) return mesh.status();
    const at::Tensor reference = ReferenceTensor({5, 4}, at::kFloat);
    auto st = Rand(ChunkShardingSpec::OnRanks(1, 3), {5, 4}, 3, {}, ctx.pg);
    if (!st.ok()) return st.status();
    auto t = MeshTensor::FromShardedTensor(*st, *mesh);
    if (!t.ok()) return t.status();
    auto a = st->FullTensor();
    auto b = t->FullTensor();
    if (!a.ok() || !b.ok() || !at::equal(*a, *b)) return absl::InternalError("values differ");
    if (t->placements() != Placements{MeshPlacement::Shard(1)}) return absl::InternalError("placement");
    auto back = t->ToShardedTensor();
    if (!back.ok()) return back.status();
    if (!(back->metadata().shards == st->metadata().shards)) return absl::InternalError("layout differs");
    auto c = back->FullTensor();
    if (!c.ok() || !at::equal(*c, *a)) return absl::InternalError("round trip values differ");
    // A 2-d mesh does not convert.
    auto mesh2 = DeviceMesh::Create(ContextOf(ctx), {3, 1}, "two");
    if (!mesh2.ok()) return mesh2.status();
    auto t2 = MeshTensor::Distribute(reference, *mesh2, {MeshPlacement::Shard(0), MeshPlacement::Replicate()});
    if (!t2.ok()) return t2.status();
    auto bad = t2->ToShardedTensor();
    if (bad.ok() || !absl::StrContains(bad.status().message(), "only a 1-d mesh with Shard(d)")) {
      return absl::InternalError(absl::StrCat("2-d mesh converted: ", bad.status().ToString()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

// Partial(op) -> Replicate (all-reduce) and -> Shard (reduce-scatter) give
// the reduction of the ranks' parts by that op, computed densely; a Partial
// of one op becomes another through the value.
TEST(MeshTensorTest, PartialOpsReduceWithTheirOp) {
  SimulatedCluster cluster(3, Options());
  absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    auto mesh = DeviceMesh::Create(ContextOf(ctx), {3});
    if (!mesh.ok()) return mesh.status();
    // Rank r's part of a [4, 2] tensor; every rank builds all three.
    auto part = [](int r) { return (at::arange(8, at::kDouble).reshape({4, 2}) * (r + 1)).remainder(5) - r; };
    const at::Tensor parts = at::stack({part(0), part(1), part(2)});
    const std::vector<std::pair<PartialOp, at::Tensor>> cases = {{PartialOp::kSum, parts.sum(0)},
                                                                 {PartialOp::kAvg, parts.mean(0)},
                                                                 {PartialOp::kMax, parts.amax(0)},
                                                                 {PartialOp::kMin, parts.amin(0)}};
    for (const auto& [op, expected] : cases) {
      const Placements partial = {MeshPlacement::Partial(op)};
      const std::string what = PlacementsString(partial);
      auto t = MeshTensor::FromLocal(part(ctx.rank), *mesh, partial, {4, 2});
      if (!t.ok()) return t.status();
      auto replicated = t->Redistribute({MeshPlacement::Replicate()});
      if (!replicated.ok()) return replicated.status();
      if (!at::allclose(replicated->local(), expected)) return absl::InternalError(what + " -> Replicate");
      auto sharded = t->Redistribute({MeshPlacement::Shard(0)});
      if (!sharded.ok()) return sharded.status();
      if (!at::allclose(sharded->local(), Region(expected, sharded->LocalBox()))) {
        return absl::InternalError(what + " -> Shard(0)");
      }
      // Replicate -> Partial(op) -> Replicate keeps the value.
      auto back = replicated->Redistribute(partial);
      if (!back.ok()) return back.status();
      auto full = back->FullTensor();
      if (!full.ok()) return full.status();
      if (!at::allclose(*full, expected)) return absl::InternalError(what + " round trip through Replicate");
      // Partial(sum) -> Partial(op): the same value.
      auto as_sum = MeshTensor::Distribute(expected, *mesh, {MeshPlacement::Partial()});
      if (!as_sum.ok()) return as_sum.status();
      auto converted = as_sum->Redistribute(partial);
      if (!converted.ok()) return converted.status();
      auto value = converted->FullTensor();
      if (!value.ok()) return value.status();
      if (!at::allclose(*value, expected)) return absl::InternalError("Partial(sum) -> " + what);
    }
    if (PlacementsString({MeshPlacement::Partial(PartialOp::kAvg), MeshPlacement::Partial(PartialOp::kMin)}) !=
        "[Partial(avg), Partial(min)]") {
      return absl::InternalError("placement names");
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

// Bytes each transition moves per rank, on a 2 x 4 mesh of an 8 x 12 float
// tensor: the minimum for each collective.
TEST(MeshTensorTest, BytesMovedAreTheMinimum) {
  SimulatedCluster cluster(8, Options());
  auto out = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::vector<int64_t>> {
    auto mesh = DeviceMesh::Create(ContextOf(ctx), {2, 4});
    if (!mesh.ok()) return mesh.status();
    const auto R = MeshPlacement::Replicate();
    const auto P = MeshPlacement::Partial();
    const auto S = [](int64_t d) { return MeshPlacement::Shard(d); };
    struct Case {
      Placements from, to;
    };
    // The row piece (dim 0 Replicate) is 8 x 12 floats = 384 bytes.
    const std::vector<Case> cases = {
        {{R, S(0)}, {R, R}},        // all-gather over 4: 3/4 of 384 each way
        {{R, S(0)}, {R, S(1)}},     // all-to-all over 4: 3/4 of its 96
        {{R, P}, {R, S(1)}},        // reduce-scatter over 4: 3/4 of 384 each way
        {{R, R}, {R, S(1)}},        // local slice: nothing
        {{S(0), S(1)}, {R, S(1)}},  // all-gather over 2 of 8 x 3 pieces
    };
    std::vector<int64_t> bytes;
    for (const Case& c : cases) {
      MeshFactoryOptions o;
      o.init = MeshInit::kRand;
      auto t = MeshFactory(*mesh, c.from, {8, 12}, o);
      if (!t.ok()) return t.status();
      RedistributeStats stats;
      auto r = t->Redistribute(c.to, &stats);
      if (!r.ok()) return r.status();
      bytes.push_back(stats.bytes_sent);
      bytes.push_back(stats.bytes_received);
    }
    return bytes;
  });
  ASSERT_TRUE(out.ok()) << out.status();
  for (const auto& bytes : *out) {
    EXPECT_THAT(bytes, ::testing::ElementsAre(288, 288,  // its 96 to 3 peers, 3 x 96 from them
                                              72, 72,    // 3 of its 4 column blocks of 2 x 3
                                              288, 288,  // 3 row blocks of 96 out, 3 addends in
                                              0, 0,      // a local slice
                                              48, 48));  // its 4 x 3 piece to its 1 peer
  }
}

}  // namespace
}  // namespace shardlight::sharded::mesh
