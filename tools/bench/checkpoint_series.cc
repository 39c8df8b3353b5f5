#include "tools/bench/checkpoint_series.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/sharded_tensor.h"
#include "sharded/sharding_spec.h"
#include "sharded/state_dict.h"
#include "simulate/core/simulated_cluster.h"
#include "tools/bench/bench_phases.h"

namespace shardlight::tools::bench {
namespace {

namespace ckpt = sharded::checkpoint;
using sharded::ShardedTensor;
using sharded::StateDict;
using simulate::RankContext;

constexpr int64_t kShapes[4][2] = {{2, 2}, {8, 8}, {16, 32}, {64, 32}};
constexpr int64_t kChunk = int64_t{8} << 20;

std::vector<int64_t> ShapeOf(int t, int scale) { return {kShapes[t % 4][0] * scale, kShapes[t % 4][1]}; }

// Element `linear` of tensor `t`: exact in float32, different per tensor.
inline float Pattern(int64_t linear, int t) { return static_cast<float>(((linear * 7 + t) & 0xFFFFF)); }

void Fill(const at::Tensor& dst, int64_t first_linear, int t) {
  float* p = static_cast<float*>(dst.data_ptr());
  for (int64_t k = 0; k < dst.numel(); ++k) p[k] = Pattern(first_linear + k, t);
}

// This rank's part of the workload, made without communication: even
// tensors chunk-sharded on dim 0, odd ones dense.
absl::StatusOr<StateDict> MakeMixedState(const SeriesConfig& c, bool fill,
                                         const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  StateDict state;
  for (int t = 0; t < c.tensors; ++t) {
    const std::vector<int64_t> shape = ShapeOf(t, c.scale);
    const std::string key = absl::StrCat("layer", t / 4, ".p", t % 4);
    absl::Status s;
    if (t % 2 == 1) {
      at::Tensor dense = at::zeros(shape, at::kFloat);
      if (fill) Fill(dense, 0, t);
      s = state.Insert(key, dense);
    } else {
      auto meta = sharded::BuildMetadata(sharded::ChunkShardingSpec::OnRanks(0, pg->getSize()), shape,
                                         {c10::ScalarType::Float, false}, pg->getSize());
      if (!meta.ok()) return meta.status();
      std::vector<sharded::Shard> shards = sharded::AllocateLocalShards(*meta, pg->getRank());
      for (sharded::Shard& shard : shards) {
        shard.tensor.zero_();
        if (fill) Fill(shard.tensor, shard.metadata.offsets[0] * shape[1], t);
      }
      auto st = ShardedTensor::InitFromLocalShardsAndGlobalMetadata(std::move(shards), *std::move(meta), pg);
      if (!st.ok()) return st.status();
      s = state.Insert(key, *std::move(st));
    }
    if (!s.ok()) return s;
  }
  return state;
}

// f(tensor, linear index of its first element, index of its key, dense?)
// for every tensor this rank holds.
template <typename F>
void ForEachLocal(const StateDict& state, F&& f) {
  int t = 0;
  for (const auto& [key, value] : state.entries()) {
    if (const at::Tensor* dense = std::get_if<at::Tensor>(&value)) {
      f(*dense, int64_t{0}, t++, true);
      continue;
    }
    const ShardedTensor& st = std::get<ShardedTensor>(value);
    for (const sharded::Shard& s : st.local_shards()) f(s.tensor, s.metadata.offsets[0] * st.sizes()[1], t, false);
    ++t;
  }
}

absl::Status CheckMixedState(const StateDict& state) {
  absl::Status status;
  ForEachLocal(state, [&](const at::Tensor& x, int64_t first, int t, bool) {
    const float* p = static_cast<const float*>(x.data_ptr());
    for (int64_t k = 0; k < x.numel() && status.ok(); ++k) {
      if (p[k] != Pattern(first + k, t)) status = absl::InternalError(absl::StrCat("tensor ", t, " differs"));
    }
  });
  return status;
}

void ZeroAll(const StateDict& state) {
  ForEachLocal(state, [](const at::Tensor& x, int64_t, int, bool) { x.zero_(); });
}

absl::Status WriteAll(int fd, const char* p, int64_t n) {
  for (int64_t pos = 0; pos < n; pos += kChunk) {
    const int64_t take = std::min(kChunk, n - pos);
    if (::write(fd, p + pos, take) != take) return absl::InternalError("short write");
  }
  return absl::OkStatus();
}

// The plain contender: this rank's bytes as one file, written and fsynced,
// or read back.
absl::Status PlainWrite(const std::vector<char>& bytes, const std::string& path) {
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return absl::InternalError("cannot create " + path);
  absl::Status s = WriteAll(fd, bytes.data(), static_cast<int64_t>(bytes.size()));
  if (s.ok() && ::fsync(fd) != 0) s = absl::InternalError("fsync failed");
  ::close(fd);
  return s;
}

absl::Status PlainRead(std::vector<char>& bytes, const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return absl::InternalError("cannot open " + path);
  const int64_t n = static_cast<int64_t>(bytes.size());
  absl::Status s;
  for (int64_t pos = 0; pos < n && s.ok(); pos += kChunk) {
    const int64_t take = std::min(kChunk, n - pos);
    if (::read(fd, bytes.data() + pos, take) != take) s = absl::InternalError("short read from " + path);
  }
  ::close(fd);
  return s;
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
  Measure save, load, plain_write, plain_read;
  std::vector<double> save_cpu, load_cpu;
  std::atomic<int64_t> pieces{0};
  simulate::ClusterOptions cluster_options;
  cluster_options.collective_timeout = std::chrono::minutes(10);
  simulate::SimulatedCluster cluster(c.world_size, cluster_options);
  absl::Status s = cluster.Run([&](RankContext& ctx) -> absl::Status {
    auto state = MakeMixedState(c, /*fill=*/true, ctx.pg);
    if (!state.ok()) return state.status();
    std::vector<char> bytes;
    ForEachLocal(*state, [&](const at::Tensor& x, int64_t, int, bool dense) {
      const char* p = static_cast<const char*>(x.data_ptr());
      if (!dense || ctx.rank == 0) bytes.insert(bytes.end(), p, p + x.numel() * 4);  // dense: saved by rank 0
    });
    const std::string mine = absl::StrCat(plain, "/rank-", ctx.rank, ".bin");
    absl::Status st;
    for (int rep = 0; rep < c.repeats && st.ok(); ++rep) {
      st = TimedInto(ctx, &plain_write, [&] { return PlainWrite(bytes, mine); });
      if (st.ok()) {
        st = TimedWithCpu(ctx, &save, &save_cpu, [&] { return ckpt::SaveCheckpoint(*state, dir, *ctx.pg, save_options); });
      }
    }
    for (int rep = 0; rep < c.repeats && st.ok(); ++rep) {
      if (c.drop_cache && ctx.rank == 0) DropCache(plain);
      st = TimedInto(ctx, &plain_read, [&] { return PlainRead(bytes, mine); });
      ZeroAll(*state);
      if (c.drop_cache && ctx.rank == 0) DropCache(dir);
      ckpt::LoadStats stats;
      if (st.ok()) {
        st = TimedWithCpu(ctx, &load, &load_cpu,
                          [&] { return ckpt::LoadCheckpoint(*state, dir, *ctx.pg, load_options, &stats); });
      }
      if (st.ok() && rep == 0) pieces += stats.pieces_read;
      if (st.ok()) st = CheckMixedState(*state);
    }
    return st;
  });
  std::filesystem::remove_all(dir, ec);
  std::filesystem::remove_all(plain, ec);
  if (!s.ok()) return s;
  SeriesPoint p;
  p.tensors = c.tensors;
  p.world_size = c.world_size;
  for (int t = 0; t < c.tensors; ++t) {
    const std::vector<int64_t> shape = ShapeOf(t, c.scale);
    p.bytes += shape[0] * shape[1] * 4;
  }
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
