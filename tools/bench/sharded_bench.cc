// Benchmarks for ShardedTensor on the simulated cluster (not a test: these
// machines are shared and noisy, so it prints figures and ratios against a
// baseline measured in the same run).
//
// 1. FullTensor() of a chunk-sharded tensor vs a raw ProcessGroupGloo
//    allgather of the same bytes (target ratio <= 1.10).
// 2. Reshard: bytes sent per rank vs the minimum, the elements whose owner
//    changes, counted independently from an owner map (target ratio 1.0).
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "sharded/factories.h"
#include "sharded/sharded_tensor.h"
#include "sharded/tensor_region.h"
#include "simulate/core/simulated_cluster.h"
#include "flags/strict_flags.h"

ABSL_FLAG(int, world_size, 4, "ranks");
ABSL_FLAG(int, mib, 256, "size of the full tensor in MiB");
ABSL_FLAG(int, reps, 5, "timed repetitions (the median is reported)");

namespace shardlight {
namespace {

using sharded::ChunkShardingSpec;
using simulate::RankContext;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double TimeMs(c10d::ProcessGroup& pg, F&& f) {
  pg.barrier()->wait();
  const auto start = std::chrono::steady_clock::now();
  f();
  pg.barrier()->wait();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

struct FullTensorResult {
  double raw_ms = 0, ours_ms = 0;
};

int BenchFullTensor(int w, int64_t mib, int reps) {
  const int64_t cols = 1024;
  const int64_t rows = mib * (1 << 20) / 4 / cols;
  simulate::ClusterOptions options;
  options.collective_timeout = std::chrono::minutes(5);
  simulate::SimulatedCluster cluster(w, options);
  auto results = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<FullTensorResult> {
    auto st = sharded::Rand(ChunkShardingSpec::OnRanks(0, w), {rows, cols}, 7, {}, ctx.pg);
    if (!st.ok()) return st.status();
    // Baseline: the same local bytes through a plain allgather (equal chunks).
    std::vector<at::Tensor> in = {st->local_shards()[0].tensor};
    std::vector<double> raw, ours;
    for (int i = 0; i < reps; ++i) {
      // Both sides allocate their result inside the timed region.
      raw.push_back(TimeMs(*ctx.pg, [&] {
        std::vector<std::vector<at::Tensor>> out(1);
        for (int r = 0; r < w; ++r) out[0].push_back(at::empty_like(in[0]));
        ctx.pg->allgather(out, in)->wait();
      }));
      absl::StatusOr<at::Tensor> full;
      ours.push_back(TimeMs(*ctx.pg, [&] { full = st->FullTensor(); }));
      if (!full.ok()) return full.status();
    }
    return FullTensorResult{Median(raw), Median(ours)};
  });
  if (!results.ok()) {
    std::fprintf(stderr, "full tensor bench failed: %s\n", results.status().ToString().c_str());
    return 1;
  }
  const FullTensorResult& r = (*results)[0];
  const double gib = static_cast<double>(rows * cols * 4) / (1 << 30);
  std::printf("FullTensor  W=%d  %.0f MiB   raw allgather %8.1f ms (%.2f GiB/s)   FullTensor %8.1f ms (%.2f GiB/s)"
              "   ratio %.3f (target <= 1.10)\n",
              w, gib * 1024, r.raw_ms, gib / (r.raw_ms / 1e3), r.ours_ms, gib / (r.ours_ms / 1e3),
              r.ours_ms / r.raw_ms);
  return 0;
}

// Elements of each rank whose owner differs between two layouts, from an
// owner map of the whole tensor.
std::vector<int64_t> ChangedOwnerElements(const sharded::ShardedTensorMetadata& from,
                                          const sharded::ShardedTensorMetadata& to, int w) {
  auto owners = [](const sharded::ShardedTensorMetadata& m) {
    at::Tensor owner = at::full(m.sizes, -1, at::kInt);
    const sharded::Box whole = sharded::Box::Whole(m.sizes);
    for (const auto& s : m.shards) sharded::RegionView(owner, whole, s).fill_(s.placement.rank);
    return owner;
  };
  at::Tensor a = owners(from), b = owners(to);
  std::vector<int64_t> per_rank(w);
  for (int r = 0; r < w; ++r) per_rank[r] = ((a == r) & (b != r)).sum().item<int64_t>();
  return per_rank;
}

int BenchReshard(int w, int64_t mib) {
  const std::vector<int64_t> sizes = {mib * 256, 1024};  // mib MiB of float32
  simulate::SimulatedCluster cluster(w);
  struct Row {
    const char* name;
    sharded::ShardingSpec from, to;
  };
  sharded::EnumerableShardingSpec uneven;  // several shards per rank, uneven, one empty
  const int64_t n = sizes[0];
  const int64_t cuts[] = {0, n / 10, n / 10, n / 3, n / 2, (3 * n) / 4, n};
  for (int i = 0; i < 6; ++i) {
    uneven.shards.push_back({{cuts[i], 0}, {cuts[i + 1] - cuts[i], 1024}, sharded::Placement::Cpu((i * 3) % w)});
  }
  std::vector<Row> rows = {
      {"chunk dim0 -> chunk dim1", ChunkShardingSpec::OnRanks(0, w), ChunkShardingSpec::OnRanks(1, w)},
      {"chunk dim0 -> uneven enumerable", ChunkShardingSpec::OnRanks(0, w), uneven},
  };
  for (const Row& row : rows) {
    auto sent = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<int64_t> {
      auto st = sharded::Zeros(row.from, sizes, {}, ctx.pg);
      if (!st.ok()) return st.status();
      sharded::ExchangeStats stats;
      auto moved = st->Reshard(row.to, &stats);
      if (!moved.ok()) return moved.status();
      return stats.bytes_sent;
    });
    if (!sent.ok()) {
      std::fprintf(stderr, "reshard bench failed: %s\n", sent.status().ToString().c_str());
      return 1;
    }
    auto from = sharded::BuildMetadata(row.from, sizes, {}, w);
    auto to = sharded::BuildMetadata(row.to, sizes, {}, w);
    const std::vector<int64_t> minimum = ChangedOwnerElements(*from, *to, w);
    std::printf("Reshard  W=%d  %-32s", w, row.name);
    for (int r = 0; r < w; ++r) {
      const double ratio = minimum[r] == 0 ? ((*sent)[r] == 0 ? 1.0 : 1e9) : (*sent)[r] / (4.0 * minimum[r]);
      std::printf("  r%d %.1f MiB/%.3f", r, (*sent)[r] / 1048576.0, ratio);
    }
    std::printf("   (sent/minimum per rank, target 1.0)\n");
  }
  return 0;
}

}  // namespace
}  // namespace shardlight

int main(int argc, char** argv) {
  shardlight::tools::flags::ParseFlagsOrExit(argc, argv);
  const int w = absl::GetFlag(FLAGS_world_size);
  const int mib = absl::GetFlag(FLAGS_mib);
  const int reps = absl::GetFlag(FLAGS_reps);
  if (w < 1 || w > 64 || mib < 1 || reps < 1) {
    std::fprintf(stderr, "sharded_bench: need 1 <= --world_size <= 64, --mib >= 1, --reps >= 1\n");
    return 2;
  }
  if (int rc = shardlight::BenchFullTensor(w, mib, reps); rc != 0) return rc;
  return shardlight::BenchReshard(w, std::max(1, mib / 4));
}
