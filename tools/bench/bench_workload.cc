#include "tools/bench/bench_workload.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/format/crc32c.h"
#include "sharded/sharding_spec.h"
#include "sharded/status_macros.h"

namespace shardlight::tools::bench {
namespace {

constexpr int64_t kChunk = int64_t{8} << 20;
constexpr int64_t kCrcStep = int64_t{256} << 10;

void Fill(const at::Tensor& x, int64_t first, int t) {
  float* p = static_cast<float*>(x.data_ptr());
  for (int64_t k = 0; k < x.numel(); ++k) p[k] = PatternValue(first + k, t);
}

constexpr int64_t kCols = 1024;
constexpr int kSizeTensors = 64;
constexpr int64_t kSmall[4][2] = {{2, 2}, {8, 8}, {16, 32}, {64, 32}};

}  // namespace

absl::StatusOr<std::vector<BenchTensor>> BenchShapes(const std::string& workload, int world) {
  const size_t colon = workload.find(':');
  const std::string kind = workload.substr(0, colon), value = colon == std::string::npos ? "" : workload.substr(colon + 1);
  std::vector<BenchTensor> out;
  if (kind == "size") {
    double gib = 0;
    if (!absl::SimpleAtod(value, &gib) || !(gib > 0 && gib <= 64)) return absl::InvalidArgumentError("bad size:GiB");
    const double total = gib * (int64_t{1} << 30);
    double weights = 0;
    for (int t = 0; t < kSizeTensors; t += 2) weights += (t / 2) % 4 + 1;
    const double unit = (total - (kSizeTensors / 2) * kCols * 4) / (weights * kCols * 4);
    for (int t = 0; t < kSizeTensors; ++t) {
      if (t % 2 == 0) {
        out.push_back({{std::max<int64_t>(world, static_cast<int64_t>(unit * ((t / 2) % 4 + 1))), kCols}, true});
      } else {
        out.push_back({{kCols}, false});
      }
    }
    return out;
  }
  int n = 0;
  if (kind != "count" || !absl::SimpleAtoi(value, &n) || n < 1 || n > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat("--workload '", workload, "' is not size:GiB or count:N"));
  }
  for (int t = 0; t < n; ++t) out.push_back({{kSmall[t % 4][0], kSmall[t % 4][1]}, t % 2 == 0});
  return out;
}


std::string BenchKey(int t) { return absl::StrCat("layer", t / 4, ".p", t % 4); }

absl::StatusOr<sharded::StateDict> BuildBenchState(const std::vector<BenchTensor>& tensors, bool fill,
                                                   const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  sharded::StateDict state;
  const int w = pg->getSize();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int t = static_cast<int>(i);
    const std::vector<int64_t>& shape = tensors[i].shape;
    if (!tensors[i].sharded) {
      at::Tensor dense = at::zeros(shape, at::kFloat);
      if (fill) Fill(dense, 0, t);
      SL_RETURN_IF_ERROR(state.Insert(BenchKey(t), dense));
      continue;
    }
    SL_ASSIGN_OR_RETURN(auto meta, sharded::BuildMetadata(sharded::ChunkShardingSpec::OnRanks(0, w), shape,
                                                          {c10::ScalarType::Float, false}, w));
    std::vector<sharded::Shard> shards = sharded::AllocateLocalShards(meta, pg->getRank());
    const int64_t row = shape.size() > 1 ? shape[1] : 1;
    for (sharded::Shard& s : shards) {
      s.tensor.zero_();
      if (fill) Fill(s.tensor, s.metadata.offsets[0] * row, t);
    }
    SL_ASSIGN_OR_RETURN(auto st, sharded::ShardedTensor::InitFromLocalShardsAndGlobalMetadata(std::move(shards),
                                                                                             std::move(meta), pg));
    SL_RETURN_IF_ERROR(state.Insert(BenchKey(t), std::move(st)));
  }
  return state;
}

absl::Status CheckBenchState(const sharded::StateDict& state, const std::string& who) {
  absl::Status status;
  ForEachLocalTensor(state, [&](const at::Tensor& x, int64_t first, int t, bool) {
    const float* p = static_cast<const float*>(x.data_ptr());
    for (int64_t k = 0; k < x.numel() && status.ok(); ++k) {
      if (p[k] != PatternValue(first + k, t)) {
        status = absl::InternalError(absl::StrCat(who, ": tensor ", BenchKey(t), " differs after the load"));
      }
    }
  });
  return status;
}

void ZeroBenchState(const sharded::StateDict& state) {
  ForEachLocalTensor(state, [](const at::Tensor& x, int64_t, int, bool) { x.zero_(); });
}

std::vector<char> LocalBytes(const sharded::StateDict& state, int rank, bool saved_only) {
  std::vector<char> bytes;
  ForEachLocalTensor(state, [&](const at::Tensor& x, int64_t, int, bool dense) {
    if (saved_only && dense && rank != 0) return;
    const char* p = static_cast<const char*>(x.data_ptr());
    bytes.insert(bytes.end(), p, p + x.numel() * static_cast<int64_t>(x.element_size()));
  });
  return bytes;
}

absl::Status WritePlainFile(const std::string& path, const std::vector<char>& bytes, bool sync) {
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return absl::InternalError("cannot create " + path);
  absl::Status s;
  for (size_t pos = 0; pos < bytes.size() && s.ok(); pos += kChunk) {
    const size_t take = std::min<size_t>(kChunk, bytes.size() - pos);
    if (::write(fd, bytes.data() + pos, take) != static_cast<ssize_t>(take)) s = absl::InternalError("short write to " + path);
  }
  if (s.ok() && sync && ::fsync(fd) != 0) s = absl::InternalError("fsync of " + path + " failed");
  ::close(fd);
  return s;
}

absl::Status ReadPlainFile(const std::string& path, std::vector<char>& into, bool crc) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return absl::InternalError("cannot open " + path);
  const off_t size = ::lseek(fd, 0, SEEK_END);
  into.resize(static_cast<size_t>(std::max<off_t>(size, 0)));
  const off_t step = crc ? kCrcStep : kChunk;
  uint32_t c = 0;
  absl::Status s;
  for (off_t pos = 0; pos < size && s.ok(); pos += step) {
    const size_t take = static_cast<size_t>(std::min<off_t>(step, size - pos));
    if (::pread(fd, into.data() + pos, take, pos) != static_cast<ssize_t>(take)) s = absl::InternalError("short read from " + path);
    if (crc) c = sharded::checkpoint::Crc32cExtend(c, into.data() + pos, take);
  }
  ::close(fd);
  if (crc && c == 0xFFFFFFFFu) std::printf(" ");  // keeps the checksum from being optimised away
  return s;
}

}  // namespace shardlight::tools::bench
