// Bytes each Redistribute transition moves per rank on a 2 x 4 mesh of a
// float tensor (--rows x --cols), beside the lower bound for that transition:
//   receive: a rank must receive every element of its new piece it did not
//   hold (Shard/Replicate sources), or (n - 1) addends of its new piece
//   (Partial -> Shard), or 2 (n - 1) / n of it (Partial -> Replicate, the
//   bandwidth-optimal all-reduce).
// The nested cases (two mesh dims sharding one tensor dim) go through one
// exchange on the whole mesh (mesh_exchange.h); every case prints received /
// minimum, and the binary fails when any rank received more than the minimum.
// Usage: bazel run //sharded/mesh:redistribute_bench -- [rows] [cols]
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "sharded/mesh/device_mesh.h"
#include "sharded/mesh/mesh_tensor.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded::mesh {
namespace {

struct Row {
  std::string name;
  int64_t sent = 0, received = 0, bound = 0;
};

int64_t Overlap(const Box& a, const Box& b) {
  std::optional<Box> both = Intersect(a, b);
  return both ? both->NumElements() : 0;
}

int Main(int64_t rows, int64_t cols) {
  const auto R = MeshPlacement::Replicate();
  const auto P = MeshPlacement::Partial();
  const auto S = [](int64_t d) { return MeshPlacement::Shard(d); };
  struct Case {
    const char* name;
    Placements from, to;
  };
  const std::vector<Case> cases = {
      {"Shard(0)->Replicate on dim 1 (all-gather over 4)", {R, S(0)}, {R, R}},
      {"Shard(0)->Shard(1) on dim 1 (all-to-all over 4)", {R, S(0)}, {R, S(1)}},
      {"Partial->Shard(1) on dim 1 (reduce-scatter over 4)", {R, P}, {R, S(1)}},
      {"Partial->Replicate on dim 1 (all-reduce over 4)", {R, P}, {R, R}},
      {"Replicate->Shard(1) on dim 1 (local slice)", {R, R}, {R, S(1)}},
      {"Shard(0)->Replicate on dim 0 (all-gather over 2)", {S(0), S(1)}, {R, S(1)}},
      {"[S(0), S(1)] -> [S(1), S(0)] (nested: one exchange)", {S(0), S(1)}, {S(1), S(0)}},
      {"[R, S(0)] -> [S(0), S(0)] (nested: one exchange)", {R, S(0)}, {S(0), S(0)}},
      {"[S(0), S(0)] -> [R, S(0)] (nested: one exchange)", {S(0), S(0)}, {R, S(0)}},
      {"[S(0), S(0)] -> [S(1), S(1)] (nested: one exchange)", {S(0), S(0)}, {S(1), S(1)}},
      {"[S(0), S(0)] -> [S(0), R] (all-gather over 4)", {S(0), S(0)}, {S(0), R}},
  };
  simulate::SimulatedCluster cluster(8);
  auto out = cluster.Run([&](simulate::RankContext& ctx) -> absl::StatusOr<std::vector<Row>> {
    MeshContext mesh_ctx;
    mesh_ctx.store = ctx.store;
    mesh_ctx.rank = ctx.rank;
    mesh_ctx.world_size = ctx.world_size;
    mesh_ctx.world = ctx.pg;
    auto mesh = DeviceMesh::Create(mesh_ctx, {2, 4});
    if (!mesh.ok()) return mesh.status();
    std::vector<Row> result;
    for (const Case& c : cases) {
      MeshFactoryOptions o;
      o.init = MeshInit::kRand;
      auto t = MeshFactory(*mesh, c.from, {rows, cols}, o);
      if (!t.ok()) return t.status();
      RedistributeStats stats;
      auto r = t->Redistribute(c.to, &stats);
      if (!r.ok()) return r.status();
      Row row{c.name, stats.bytes_sent, stats.bytes_received, 0};
      const Box before = t->LocalBox(), after = r->LocalBox();
      const int64_t n = 4;
      if (c.from[1].is_partial() && c.to[1].is_shard()) {
        row.bound = (n - 1) * after.NumElements() * 4;
      } else if (c.from[1].is_partial()) {
        row.bound = 2 * (n - 1) * after.NumElements() * 4 / n;
      } else {
        row.bound = (after.NumElements() - Overlap(before, after)) * 4;
      }
      result.push_back(row);
    }
    return result;
  });
  if (!out.ok()) {
    std::fprintf(stderr, "%s\n", out.status().ToString().c_str());
    return 1;
  }
  std::printf("redistribute on a 2x4 mesh, %lld x %lld float32; bytes per rank (rank 0; all ranks checked)\n",
              static_cast<long long>(rows), static_cast<long long>(cols));
  std::printf("%-58s %12s %12s %12s %10s\n", "transition", "sent", "received", "min received", "recv/min");
  bool all_minimal = true;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Row& row = (*out)[0][i];
    for (int r = 0; r < 8; ++r) {
      if ((*out)[r][i].received != (*out)[r][i].bound) all_minimal = false;
    }
    const double ratio = row.bound > 0 ? static_cast<double>(row.received) / static_cast<double>(row.bound)
                                       : (row.received == 0 ? 1.0 : std::numeric_limits<double>::infinity());
    std::printf("%-58s %12lld %12lld %12lld %10.3f\n", row.name.c_str(), static_cast<long long>(row.sent),
                static_cast<long long>(row.received), static_cast<long long>(row.bound), ratio);
  }
  std::printf("%s\n", all_minimal ? "every transition: every rank received exactly the minimum"
                                  : "SOME RANK RECEIVED MORE THAN THE MINIMUM");
  return all_minimal ? 0 : 1;
}

}  // namespace
}  // namespace shardlight::sharded::mesh

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 1000;
  const int64_t cols = argc > 2 ? std::atoll(argv[2]) : 1000;
  return shardlight::sharded::mesh::Main(rows, cols);
}
