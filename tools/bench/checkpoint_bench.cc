// checkpoint_bench: save and load throughput of a sharded checkpoint against
// plain sequential file I/O of the same bytes, the bytes a 4 -> 3 reshard
// reads per rank, and peak memory over the resident shards.
//
//   bazel run -c opt //tools/bench:checkpoint_bench -- [--gib=1] [--dir=/var/tmp/x]
//   bazel run -c opt //tools/bench:checkpoint_bench -- --tensors=1000,10000,100000 --drop_cache=false
//
// The second form runs the tensor-count series (checkpoint_series.h): the
// time per tensor for save and load at each count, beside plain file I/O.
//
// W = 4 thread-ranks (the simulated cluster) hold --tensors float32 tensors of
// --gib GiB in all, chunked on dim 0 (the workload of the PyTorch anchor in
// the shared anchors folder). Every timed phase runs between barriers and is
// timed on rank 0. With --drop_cache (default) the files' pages are evicted
// before each read, so reads come from the device for both contenders. The
// loaded values are checked after every load.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/storage/counting_storage.h"
#include "sharded/checkpoint/format/crc32c.h"
#include "sharded/factories.h"
#include "sharded/sharded_tensor.h"
#include "sharded/sharding_spec.h"
#include "simulate/core/simulated_cluster.h"
#include "tools/bench/bench_phases.h"
#include "tools/bench/checkpoint_series.h"
#include "flags/strict_flags.h"

ABSL_FLAG(double, gib, 1.0, "GiB of sharded float32 state (0.001 .. 64)");
ABSL_FLAG(std::vector<std::string>, tensors, {"8"},
          "number of tensors the state is split into (1 .. 1000000); several (--tensors=1000,10000,100000) run the "
          "series instead: small tensors of mixed sizes, sharded and dense, time per tensor at each count");
ABSL_FLAG(int, world_size, 4, "thread-ranks of the series (--tensors with several counts)");
ABSL_FLAG(int, scale, 1, "series: multiplies the rows of every tensor (2.6 KiB average at 1)");
ABSL_FLAG(int, cols, 4096, "columns of each tensor (rows follow from --gib)");
ABSL_FLAG(std::string, dir, "/var/tmp/shardlight_checkpoint_bench",
          "working directory, on the file system to measure (/tmp may be tmpfs); its ckpt/ and plain/ are replaced");
ABSL_FLAG(bool, drop_cache, true, "evict the files from the page cache before each read phase");
ABSL_FLAG(bool, keep, false, "keep the files afterwards");
ABSL_FLAG(int, block_kib, 256, "checksum block size in KiB");
ABSL_FLAG(int, buffer_mib, 16, "save/load staging buffer per rank in MiB");
ABSL_FLAG(std::string, crc32c, "",
          "CRC32C implementation for the whole run (avx512-vpclmulqdq, sse4.2, portable); empty: the fastest this "
          "machine has. To compare the load's checksum cost across implementations in the same conditions");
ABSL_FLAG(int, repeats, 3, "times each timed phase runs; the best time is reported (the noisiest machines vary)");

namespace {

namespace ckpt = shardlight::sharded::checkpoint;
namespace fs = std::filesystem;
using shardlight::sharded::ChunkShardingSpec;
using shardlight::sharded::ShardedTensor;
using shardlight::sharded::StateDict;
using shardlight::simulate::RankContext;
using shardlight::simulate::SimulatedCluster;
using Clock = std::chrono::steady_clock;
using shardlight::tools::bench::DropCache;
using shardlight::tools::bench::Measure;
using shardlight::tools::bench::Phase;
using shardlight::tools::bench::TimedInto;

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = kMiB * 1024.0;
constexpr int64_t kChunk = int64_t{8} << 20;
// Rows of a tensor at least: a chunk for each rank of the W=4 save and the
// W=3 load.
constexpr int64_t kMinRows = 12;

struct Workload {
  int tensors;
  int64_t rows;
  int64_t cols;
  int64_t total_bytes() const { return tensors * rows * cols * 4; }
};

// Value of element `linear` of tensor `t`: exact in float32.
inline float Pattern(int64_t linear, int t) { return static_cast<float>((linear & 0x7FFFFF) + t); }

absl::StatusOr<StateDict> MakeState(const Workload& w, bool fill, const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  StateDict state;
  for (int t = 0; t < w.tensors; ++t) {
    auto st = fill ? shardlight::sharded::Empty(ChunkShardingSpec::OnRanks(0, pg->getSize()), {w.rows, w.cols},
                                                {c10::ScalarType::Float, false}, pg)
                   : shardlight::sharded::Zeros(ChunkShardingSpec::OnRanks(0, pg->getSize()), {w.rows, w.cols},
                                                {c10::ScalarType::Float, false}, pg);
    if (!st.ok()) return st.status();
    if (fill) {
      for (auto& shard : st->local_shards()) {
        float* p = static_cast<float*>(shard.tensor.data_ptr());
        const int64_t base = shard.metadata.offsets[0] * w.cols;
        for (int64_t k = 0; k < shard.tensor.numel(); ++k) p[k] = Pattern(base + k, t);
      }
    }
    absl::Status s = state.Insert(absl::StrCat("layer", t, ".weight"), *std::move(st));
    if (!s.ok()) return s;
  }
  return state;
}

absl::Status CheckState(const StateDict& state, const Workload& w) {
  for (int t = 0; t < w.tensors; ++t) {
    const auto& st = std::get<ShardedTensor>(*state.Find(absl::StrCat("layer", t, ".weight")));
    for (const auto& shard : st.local_shards()) {
      const float* p = static_cast<float*>(shard.tensor.data_ptr());
      const int64_t base = shard.metadata.offsets[0] * w.cols;
      for (int64_t k = 0; k < shard.tensor.numel(); ++k) {
        if (p[k] != Pattern(base + k, t)) {
          return absl::InternalError(absl::StrCat("layer", t, ".weight differs at element ", base + k));
        }
      }
    }
  }
  return absl::OkStatus();
}

int64_t LocalBytes(const StateDict& state) {
  int64_t n = 0;
  for (const auto& [key, value] : state.entries()) {
    for (const auto& s : std::get<ShardedTensor>(value).local_shards()) n += s.tensor.numel() * 4;
  }
  return n;
}

// Plain sequential I/O of this rank's shard bytes: one file, 8 MiB calls.
absl::Status PlainWrite(const StateDict& state, const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return absl::InternalError("cannot create " + path);
  for (const auto& [key, value] : state.entries()) {
    for (const auto& s : std::get<ShardedTensor>(value).local_shards()) {
      const char* p = static_cast<const char*>(s.tensor.data_ptr());
      const int64_t n = s.tensor.numel() * 4;
      for (int64_t pos = 0; pos < n; pos += kChunk) {
        if (::write(fd, p + pos, std::min(kChunk, n - pos)) != std::min(kChunk, n - pos)) {
          ::close(fd);
          return absl::InternalError("short write to " + path);
        }
      }
    }
  }
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok ? absl::OkStatus() : absl::InternalError("fsync failed");
}

absl::Status PlainRead(const StateDict& state, const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return absl::InternalError("cannot open " + path);
  for (const auto& [key, value] : state.entries()) {
    for (const auto& s : std::get<ShardedTensor>(value).local_shards()) {
      char* p = static_cast<char*>(s.tensor.data_ptr());
      const int64_t n = s.tensor.numel() * 4;
      for (int64_t pos = 0; pos < n; pos += kChunk) {
        if (::read(fd, p + pos, std::min(kChunk, n - pos)) != std::min(kChunk, n - pos)) {
          ::close(fd);
          return absl::InternalError("short read from " + path);
        }
      }
    }
  }
  ::close(fd);
  return absl::OkStatus();
}

// Plain sequential reads of as many bytes as this rank's shards hold, taken
// from the concatenation of the W = 4 plain files at `offset`: the baseline
// for a load at another world size.
absl::Status PlainReadShare(const StateDict& state, const std::string& plain_dir, int64_t offset) {
  std::vector<std::pair<std::string, int64_t>> files;
  for (int r = 0; r < 4; ++r) {
    const std::string path = absl::StrCat(plain_dir, "/rank-", r, ".bin");
    files.emplace_back(path, static_cast<int64_t>(fs::file_size(path)));
  }
  size_t f = 0;
  while (f < files.size() && offset >= files[f].second) offset -= files[f++].second;
  int fd = -1;
  for (const auto& [key, value] : state.entries()) {
    for (const auto& s : std::get<ShardedTensor>(value).local_shards()) {
      char* p = static_cast<char*>(s.tensor.data_ptr());
      int64_t n = s.tensor.numel() * 4;
      while (n > 0 && f < files.size()) {
        if (fd < 0) fd = ::open(files[f].first.c_str(), O_RDONLY);
        if (fd < 0) return absl::InternalError("cannot open " + files[f].first);
        const int64_t take = std::min({kChunk, n, files[f].second - offset});
        if (::pread(fd, p, take, offset) != take) {
          ::close(fd);
          return absl::InternalError("short read from " + files[f].first);
        }
        p += take;
        n -= take;
        offset += take;
        if (offset == files[f].second) {
          ::close(fd);
          fd = -1;
          ++f;
          offset = 0;
        }
      }
    }
  }
  if (fd >= 0) ::close(fd);
  return absl::OkStatus();
}

void Zero(const StateDict& state) {
  for (const auto& [key, value] : state.entries()) {
    for (const auto& shard : std::get<ShardedTensor>(value).local_shards()) shard.tensor.zero_();
  }
}

struct Results {
  Measure plain_write, save, plain_read, load4, plain_read3, load3;
  int64_t shard_bytes_w4 = 0;  // all ranks, = the workload
  std::vector<ckpt::LoadStats> reshard_stats;
  std::vector<int64_t> reshard_shard_bytes;
};

std::string Row(const std::string& name, const Measure& p, int64_t bytes, const Measure* plain) {
  const double gibs = bytes / kGiB / p.seconds();
  std::string row = absl::StrFormat("  %-22s %8.3f s %8.2f GiB/s", name, p.seconds(), gibs);
  if (plain != nullptr) {
    const double plain_gibs = bytes / kGiB / plain->seconds();
    const double ratio = gibs / plain_gibs;
    absl::StrAppend(&row, absl::StrFormat("   plain %7.2f GiB/s   ratio %.2f (target >= 0.8: %s)", plain_gibs, ratio,
                                          ratio >= 0.8 ? "met" : "MISSED"));
  }
  return row;
}

std::string Memory(const std::string& name, const Measure& m, int64_t resident_shards) {
  const Phase& p = m.worst_memory();
  const double extra = p.extra() / kMiB;
  return absl::StrFormat("  %-22s peak %8.1f MiB = resident %8.1f MiB (shards %8.1f MiB) %+7.1f MiB (target <= +128: %s)",
                         name, p.peak / kMiB, p.rss_before / kMiB, resident_shards / kMiB, extra,
                         extra <= 128 ? "met" : "MISSED") +
         (p.peak_reset ? "" : " [VmHWM could not be reset: the peak is the process's lifetime peak]");
}

constexpr int kMaxTensors = 1000000;

// --tensors=N1,N2,...: the time per tensor of small mixed tensors.
int RunSeries(const std::vector<int>& counts) {
  shardlight::tools::bench::SeriesConfig config;
  config.world_size = absl::GetFlag(FLAGS_world_size);
  config.scale = absl::GetFlag(FLAGS_scale);
  config.dir = absl::GetFlag(FLAGS_dir);
  config.drop_cache = absl::GetFlag(FLAGS_drop_cache);
  config.repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  config.block_bytes = int64_t{absl::GetFlag(FLAGS_block_kib)} << 10;
  config.buffer_bytes = int64_t{absl::GetFlag(FLAGS_buffer_mib)} << 20;
  at::set_num_threads(1);
  std::cout << absl::StrFormat(
      "checkpoint_bench series: W=%d thread-ranks, small float32 tensors of mixed sizes (even: chunked on dim 0, odd: "
      "dense), scale %d; page cache %s; best of %d\n"
      "  plain = each rank writes (fsync) / reads its own bytes as one file, same run; a piece = one saved shard\n"
      "  (or dense tensor) read into one destination box, all ranks together; cpu = process user+sys\n"
      "  %8s %10s %9s %12s %11s %9s %12s %11s %8s %10s %9s %9s %10s\n",
      config.world_size, config.scale, config.drop_cache ? "dropped before reads" : "kept", config.repeats, "tensors",
      "MiB", "save s", "save us/t", "save ratio", "load s", "load us/t", "load ratio", "pieces", "load us/p",
      "save cpu", "load cpu", "cpu us/p");
  double min_save = 0, max_save = 0, min_load = 0, max_load = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    config.tensors = counts[i];
    auto p = shardlight::tools::bench::MeasureSeriesPoint(config);
    if (!p.ok()) {
      std::cerr << "checkpoint_bench: series at " << counts[i] << " tensors failed: " << p.status() << "\n";
      return 1;
    }
    std::cout << absl::StrFormat("  %8d %10.2f %9.3f %12.2f %11.3f %9.3f %12.2f %11.3f %8d %10.2f %9.3f %9.3f %10.2f\n",
                                 p->tensors, p->bytes / kMiB, p->save_s, p->save_per_tensor_us(), p->save_ratio(),
                                 p->load_s, p->load_per_tensor_us(), p->load_ratio(), p->pieces,
                                 p->load_per_piece_us(), p->save_cpu_s, p->load_cpu_s, p->load_cpu_per_piece_us());
    std::cout.flush();
    const double save = p->save_per_tensor_us(), load = p->load_per_tensor_us();
    min_save = i ? std::min(min_save, save) : save;
    max_save = i ? std::max(max_save, save) : save;
    min_load = i ? std::min(min_load, load) : load;
    max_load = i ? std::max(max_load, load) : load;
  }
  std::cout << absl::StrFormat(
      "  time per tensor, largest / smallest over the series: save %.2fx, load %.2fx (target <= 1.5: %s)\n",
      max_save / min_save, max_load / min_load, max_save <= 1.5 * min_save && max_load <= 1.5 * min_load ? "met" : "MISSED");
  return 0;
}

int Run(int tensors) {
  const double gib = absl::GetFlag(FLAGS_gib);
  const int cols = absl::GetFlag(FLAGS_cols);
  if (!(gib >= 0.001 && gib <= 64) || tensors < 1 || tensors > kMaxTensors || cols < 1 || absl::GetFlag(FLAGS_block_kib) < 1 ||
      absl::GetFlag(FLAGS_buffer_mib) < 1) {
    std::cerr << "checkpoint_bench: bad flags (see --help)\n";
    return 2;
  }
  Workload w{tensors, std::max<int64_t>(kMinRows, static_cast<int64_t>(gib * kGiB / (4.0 * tensors * cols))), cols};
  if (w.total_bytes() > 2 * gib * kGiB) {
    // The row floor would make the state many times what was asked (100000
    // tensors of 12 x 4096 are 18 GiB, not 1): refused before any memory.
    std::cerr << absl::StrFormat(
        "checkpoint_bench: --tensors=%d of --cols=%d need at least %d rows each, %.2f GiB of state, not the %.3g "
        "GiB of --gib; ask for fewer tensors, fewer --cols or more --gib, or run the small-tensor series "
        "(several counts: --tensors=100,%d)\n",
        tensors, cols, kMinRows, w.total_bytes() / kGiB, gib, tensors);
    return 2;
  }
  const std::string root = absl::GetFlag(FLAGS_dir);
  const std::string dir = root + "/ckpt", plain = root + "/plain";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::remove_all(plain, ec);
  fs::create_directories(plain, ec);
  if (ec) {
    std::cerr << "checkpoint_bench: cannot create " << plain << ": " << ec.message() << "\n";
    return 1;
  }
  at::set_num_threads(1);  // one core per rank, like the anchor's processes
  if (const std::string crc = absl::GetFlag(FLAGS_crc32c); !crc.empty() && !ckpt::UseCrc32cImplementation(crc)) {
    std::cerr << "checkpoint_bench: --crc32c=" << crc << ": not an implementation this machine runs\n";
    return 2;
  }
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  ckpt::SaveOptions save_options;
  save_options.checksum_block_bytes = int64_t{absl::GetFlag(FLAGS_block_kib)} << 10;
  save_options.buffer_bytes = int64_t{absl::GetFlag(FLAGS_buffer_mib)} << 20;
  ckpt::LoadOptions load_options;
  load_options.buffer_bytes = save_options.buffer_bytes;

  std::cout << absl::StrFormat(
      "checkpoint_bench: %.2f GiB of float32 state, %d tensors x [%d, %d] chunked on dim 0; save W=4, load W=4 and W=3\n"
      "  dir %s; page cache %s before reads; checksum blocks %d KiB; buffers %d MiB\n",
      w.total_bytes() / kGiB, w.tensors, w.rows, w.cols, root,
      absl::GetFlag(FLAGS_drop_cache) ? "dropped" : "kept", absl::GetFlag(FLAGS_block_kib),
      absl::GetFlag(FLAGS_buffer_mib));
  {
    // The checksum's own speed on this machine, one thread, 64 MiB in cache-sized calls.
    std::vector<char> bytes(64 << 20, 1);
    const auto start = Clock::now();
    uint32_t crc = 0;
    for (size_t pos = 0; pos < bytes.size(); pos += 1 << 20) crc = ckpt::Crc32cExtend(crc, bytes.data() + pos, 1 << 20);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::cout << absl::StrFormat("  crc32c: %.1f GiB/s on one thread (%s)%s\n", bytes.size() / kGiB / seconds,
                                 ckpt::Crc32cImplementationName(), crc == 0 ? " " : "");
  }

  Results r;
  shardlight::simulate::ClusterOptions cluster_options;
  cluster_options.collective_timeout = std::chrono::minutes(10);
  {
    SimulatedCluster cluster(4, cluster_options);
    absl::Status s = cluster.Run([&](RankContext& ctx) -> absl::Status {
      const std::string mine = absl::StrCat(plain, "/rank-", ctx.rank, ".bin");
      auto state = MakeState(w, /*fill=*/true, ctx.pg);
      if (!state.ok()) return state.status();
      absl::Status st;
      for (int rep = 0; rep < repeats && st.ok(); ++rep) {
        ::unlink(mine.c_str());  // a fresh file, as the save writes fresh files (outside the timing)
        st = TimedInto(ctx, &r.plain_write, [&] { return PlainWrite(*state, mine); });
        if (st.ok()) st = TimedInto(ctx, &r.save, [&] { return ckpt::SaveCheckpoint(*state, dir, *ctx.pg, save_options); });
      }
      if (!st.ok()) return st;
      // The source state goes; the load targets (zeros, so resident) come.
      *state = StateDict();
      auto target = MakeState(w, /*fill=*/false, ctx.pg);
      if (!target.ok()) return target.status();
      for (int rep = 0; rep < repeats && st.ok(); ++rep) {
        if (ctx.rank == 0 && absl::GetFlag(FLAGS_drop_cache)) DropCache(plain);
        st = TimedInto(ctx, &r.plain_read, [&] { return PlainRead(*target, mine); });
        if (st.ok() && rep == 0) st = CheckState(*target, w);  // the baseline read the same bytes
        Zero(*target);
        if (ctx.rank == 0 && absl::GetFlag(FLAGS_drop_cache)) DropCache(dir);
        if (st.ok()) st = TimedInto(ctx, &r.load4, [&] { return ckpt::LoadCheckpoint(*target, dir, *ctx.pg, load_options); });
      }
      if (!st.ok()) return st;
      return CheckState(*target, w);
    });
    if (!s.ok()) {
      std::cerr << "checkpoint_bench: W=4 phase failed: " << s << "\n";
      return 1;
    }
  }
  r.reshard_stats.resize(3);
  r.reshard_shard_bytes.resize(3);
  {
    SimulatedCluster cluster(3, cluster_options);
    absl::Status s = cluster.Run([&](RankContext& ctx) -> absl::Status {
      auto target = MakeState(w, /*fill=*/false, ctx.pg);
      if (!target.ok()) return target.status();
      r.reshard_shard_bytes[ctx.rank] = LocalBytes(*target);
      ctx.pg->barrier()->wait();  // every rank's share is known
      int64_t offset = 0;
      for (int k = 0; k < ctx.rank; ++k) offset += r.reshard_shard_bytes[k];
      absl::Status st;
      for (int rep = 0; rep < repeats && st.ok(); ++rep) {
        if (ctx.rank == 0 && absl::GetFlag(FLAGS_drop_cache)) DropCache(plain);
        st = TimedInto(ctx, &r.plain_read3, [&] { return PlainReadShare(*target, plain, offset); });
        Zero(*target);
        if (ctx.rank == 0 && absl::GetFlag(FLAGS_drop_cache)) DropCache(dir);
        if (st.ok()) {
          st = TimedInto(ctx, &r.load3, [&] {
            return ckpt::LoadCheckpoint(*target, dir, *ctx.pg, load_options, &r.reshard_stats[ctx.rank]);
          });
        }
      }
      if (!st.ok()) return st;
      return CheckState(*target, w);
    });
    if (!s.ok()) {
      std::cerr << "checkpoint_bench: W=3 phase failed: " << s << "\n";
      return 1;
    }
  }

  // A selective load of one key, on one rank, through a storage that counts
  // every byte read (index and headers included).
  const std::string one_key = absl::StrCat("layer", w.tensors / 2, ".weight");
  auto counting = std::make_shared<ckpt::CountingStorage>(ckpt::PosixStorage());
  {
    SimulatedCluster cluster(1, cluster_options);
    absl::Status s = cluster.Run([&](RankContext& ctx) -> absl::Status {
      auto all = MakeState(w, /*fill=*/false, ctx.pg);
      if (!all.ok()) return all.status();
      StateDict one;
      one.Set(one_key, *all->Find(one_key));
      ckpt::LoadOptions options = load_options;
      options.keys = {one_key};
      options.storage = counting;
      return ckpt::LoadCheckpoint(one, dir, *ctx.pg, options);
    });
    if (!s.ok()) {
      std::cerr << "checkpoint_bench: one-key load failed: " << s << "\n";
      return 1;
    }
  }

  const int64_t bytes = w.total_bytes();
  std::cout << "throughput, best of " << repeats
            << " (all ranks together; plain = each rank writes/reads as many bytes sequentially, one file per W=4 "
               "rank, fsync after writing):\n"
            << Row("save W=4 (with fsync)", r.save, bytes, &r.plain_write) << "\n"
            << Row("load W=4", r.load4, bytes, &r.plain_read) << "\n"
            << Row("load W=3 (reshard)", r.load3, bytes, &r.plain_read3) << "\n";
  std::cout << "reshard 4 -> 3: bytes read per rank / bytes of its new shards (target <= 1.05):\n";
  for (int k = 0; k < 3; ++k) {
    const ckpt::LoadStats& st = r.reshard_stats[k];
    const double ratio = static_cast<double>(st.total_bytes_read()) / r.reshard_shard_bytes[k];
    std::cout << absl::StrFormat(
        "  rank %d: read %9.2f MiB (data %.2f + headers %.3f + index %.3f) for %9.2f MiB of shards: %.4f (%s)\n", k,
        st.total_bytes_read() / kMiB, st.data_bytes_read / kMiB, st.header_bytes_read / kMiB,
        st.index_bytes_read / kMiB, r.reshard_shard_bytes[k] / kMiB, ratio, ratio <= 1.05 ? "met" : "MISSED");
  }
  {
    const int64_t tensor_bytes = w.rows * w.cols * 4;
    const double ratio = static_cast<double>(counting->bytes_read()) / tensor_bytes;
    std::cout << absl::StrFormat(
        "selective load of one key (%s) of %d, W=1: read %.2f MiB (index and headers included, counted at the "
        "storage) for %.2f MiB: %.4f (target <= 1.1: %s)\n",
        one_key, w.tensors, counting->bytes_read() / kMiB, tensor_bytes / kMiB, ratio, ratio <= 1.1 ? "met" : "MISSED");
  }
  std::cout << "peak RSS of the process (all ranks) over what it held when the phase began, worst of " << repeats
            << ":\n"
            << Memory("save W=4", r.save, bytes) << "\n"
            << Memory("load W=4", r.load4, bytes) << "\n"
            << Memory("load W=3", r.load3, bytes) << "\n";
  if (!absl::GetFlag(FLAGS_keep)) {
    fs::remove_all(dir, ec);
    fs::remove_all(plain, ec);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "checkpoint_bench [--gib=1] [--dir=DIR] | --tensors=1000,10000,100000 [--world_size=4]: sharded checkpoint vs "
      "plain file I/O");
  shardlight::tools::flags::ParseFlagsOrExit(argc, argv);
  std::vector<int> counts;
  for (const std::string& text : absl::GetFlag(FLAGS_tensors)) {
    int n = 0;
    if (!absl::SimpleAtoi(text, &n) || n < 1 || n > kMaxTensors) {
      std::cerr << "checkpoint_bench: --tensors: '" << text << "' is not a count in [1, " << kMaxTensors << "]\n";
      return 2;
    }
    counts.push_back(n);
  }
  if (counts.empty()) {
    std::cerr << "checkpoint_bench: --tensors is empty\n";
    return 2;
  }
  return counts.size() > 1 ? RunSeries(counts) : Run(counts[0]);
}
