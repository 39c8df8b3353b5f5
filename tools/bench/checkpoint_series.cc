#include "tools/bench/checkpoint_series.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/state_dict.h"
#include "simulate/core/simulated_cluster.h"
#include "tools/bench/bench_phases.h"
#include "tools/bench/bench_workload.h"

namespace shardlight::tools::bench {
namespace {

namespace ckpt = sharded::checkpoint;
using sharded::StateDict;
using simulate::RankContext;

constexpr int64_t kShapes[4][2] = {{2, 2}, {8, 8}, {16, 32}, {64, 32}};

// Even tensors chunk-sharded on dim 0, odd ones dense.
std::vector<BenchTensor> Workload(const SeriesConfig& c) {
  std::vector<BenchTensor> out;
  for (int t = 0; t < c.tensors; ++t) out.push_back({{kShapes[t % 4][0] * c.scale, kShapes[t % 4][1]}, t % 2 == 0});
  return out;
}

// CPU seconds (user + sys) of the whole process so far.
double ProcessCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// TimedInto, plus the process CPU time of the phase (rank 0 samples it
// between the barriers that bound the timed part).
template <typename F>
absl::Status TimedWithCpu(RankContext& ctx, Measure* m, std::vector<double>* cpu, F&& body) {
  double before = 0;
  absl::Status s = TimedInto(ctx, m, [&] {
    if (ctx.rank == 0) before = ProcessCpuSeconds();
    absl::Status r = body();
    ctx.pg->barrier()->wait();
    if (ctx.rank == 0) cpu->push_back(ProcessCpuSeconds() - before);
    return r;
  });
  return s;
}

// The CPU time of the run with the best wall time.
double CpuOfBest(const Measure& m, const std::vector<double>& cpu) {
  size_t best = 0;
  for (size_t i = 1; i < m.runs.size() && i < cpu.size(); ++i) {
    if (m.runs[i].seconds < m.runs[best].seconds) best = i;
  }
  return best < cpu.size() ? cpu[best] : 0;
}

}  // namespace

absl::StatusOr<SeriesPoint> MeasureSeriesPoint(const SeriesConfig& c) {
  if (c.tensors < 1 || c.world_size < 1 || c.scale < 1 || c.dir.empty()) {
    return absl::InvalidArgumentError("series point: tensors, world_size and scale must be >= 1, dir non-empty");
  }
  const std::string dir = c.dir + "/ckpt", plain = c.dir + "/plain";
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::remove_all(plain, ec);
  std::filesystem::create_directories(plain, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", plain, ": ", ec.message()));
  ckpt::SaveOptions save_options;
  save_options.checksum_block_bytes = c.block_bytes;
  save_options.buffer_bytes = c.buffer_bytes;
  ckpt::LoadOptions load_options;
  load_options.buffer_bytes = c.buffer_bytes;
  const std::vector<BenchTensor> workload = Workload(c);
  Measure save, load, plain_write, plain_read;
  std::vector<double> save_cpu, load_cpu;
  std::atomic<int64_t> pieces{0};
  simulate::ClusterOptions cluster_options;
  cluster_options.collective_timeout = std::chrono::minutes(10);
  simulate::SimulatedCluster cluster(c.world_size, cluster_options);
  absl::Status s = cluster.Run([&](RankContext& ctx) -> absl::Status {
    auto state = BuildBenchState(workload, /*fill=*/true, ctx.pg);
    if (!state.ok()) return state.status();
    std::vector<char> bytes = LocalBytes(*state, ctx.rank, /*saved_only=*/true);
    const std::string mine = absl::StrCat(plain, "/rank-", ctx.rank, ".bin");
    absl::Status st;
    for (int rep = 0; rep < c.repeats && st.ok(); ++rep) {
      st = TimedInto(ctx, &plain_write, [&] { return WritePlainFile(mine, bytes, true); });
      if (st.ok()) {
        st = TimedWithCpu(ctx, &save, &save_cpu, [&] { return ckpt::SaveCheckpoint(*state, dir, *ctx.pg, save_options); });
      }
    }
    for (int rep = 0; rep < c.repeats && st.ok(); ++rep) {
      if (c.drop_cache && ctx.rank == 0) DropCache(plain);
      st = TimedInto(ctx, &plain_read, [&] { return ReadPlainFile(mine, bytes, false); });
      ZeroBenchState(*state);
      if (c.drop_cache && ctx.rank == 0) DropCache(dir);
      ckpt::LoadStats stats;
      if (st.ok()) {
        st = TimedWithCpu(ctx, &load, &load_cpu,
                          [&] { return ckpt::LoadCheckpoint(*state, dir, *ctx.pg, load_options, &stats); });
      }
      if (st.ok() && rep == 0) pieces += stats.pieces_read;
      if (st.ok()) st = CheckBenchState(*state, absl::StrCat("rank ", ctx.rank));
    }
    return st;
  });
  std::filesystem::remove_all(dir, ec);
  std::filesystem::remove_all(plain, ec);
  if (!s.ok()) return s;
  SeriesPoint p;
  p.tensors = c.tensors;
  p.world_size = c.world_size;
  for (const BenchTensor& t : workload) p.bytes += t.shape[0] * t.shape[1] * 4;
  p.save_s = save.seconds();
  p.load_s = load.seconds();
  p.pieces = pieces.load();
  p.save_cpu_s = CpuOfBest(save, save_cpu);
  p.load_cpu_s = CpuOfBest(load, load_cpu);
  p.plain_write_s = plain_write.seconds();
  p.plain_read_s = plain_read.seconds();
  return p;
}

}  // namespace shardlight::tools::bench
