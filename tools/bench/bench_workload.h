// The benchmarks' state dicts and plain-I/O baselines, shared by
// checkpoint_series (thread-ranks) and dcp_compare_rank (torchrun processes):
// tensors keyed "layer<t/4>.p<t%4>", the even ones row-sharded on dim 0 with
// torch.chunk's rows (ChunkShardingSpec: uneven and empty shards), the odd
// ones dense on every rank; every element a value exact in float32 that
// differs per tensor, so a load is checked element by element.
#ifndef SHARDLIGHT_TOOLS_BENCH_BENCH_WORKLOAD_H_
#define SHARDLIGHT_TOOLS_BENCH_BENCH_WORKLOAD_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sharded/sharded_tensor.h"
#include "sharded/state_dict.h"

namespace shardlight::tools::bench {

// Tensor t of a workload: its global shape (float32) and whether it is
// row-sharded (else dense on every rank).
struct BenchTensor {
  std::vector<int64_t> shape;
  bool sharded = false;
};

std::string BenchKey(int t);

// The comparison workloads (dcp_compare_peer.py's shapes(), the same):
//   size:G   64 tensors, G GiB in all: even ones row-sharded [rows, 1024]
//            (rows in proportion 1:2:3:4), odd ones dense [1024];
//   count:N  N small tensors cycling through [2,2], [8,8], [16,32], [64,32],
//            even ones row-sharded.
// InvalidArgument naming `workload` when it is neither.
absl::StatusOr<std::vector<BenchTensor>> BenchShapes(const std::string& workload, int world);

// Element `linear` (row-major index in the global tensor) of tensor `t`.
inline float PatternValue(int64_t linear, int t) { return static_cast<float>((linear * 7 + t) & 0xFFFFF); }

// This rank's part of the workload, made without communication; zeros
// unless `fill`.
absl::StatusOr<sharded::StateDict> BuildBenchState(const std::vector<BenchTensor>& tensors, bool fill,
                                                   const c10::intrusive_ptr<c10d::ProcessGroup>& pg);

// f(local tensor, linear index of its first element, tensor index, dense?)
// for every tensor this rank holds, in key order (BuildBenchState's order).
template <typename F>
void ForEachLocalTensor(const sharded::StateDict& state, F&& f) {
  int t = 0;
  for (const auto& [key, value] : state.entries()) {
    if (const at::Tensor* dense = std::get_if<at::Tensor>(&value)) {
      f(*dense, int64_t{0}, t++, true);
      continue;
    }
    const sharded::ShardedTensor& st = std::get<sharded::ShardedTensor>(value);
    const int64_t row = st.sizes().size() > 1 ? st.sizes()[1] : 1;
    for (const sharded::Shard& s : st.local_shards()) f(s.tensor, s.metadata.offsets[0] * row, t, false);
    ++t;
  }
}

// InternalError naming `who` and the first tensor whose values differ.
absl::Status CheckBenchState(const sharded::StateDict& state, const std::string& who);
void ZeroBenchState(const sharded::StateDict& state);

// The rank's local bytes in key order: with `saved_only`, what its
// checkpoint file holds (shards; dense tensors on rank 0 only), else every
// byte a load fills on this rank (dense tensors included).
std::vector<char> LocalBytes(const sharded::StateDict& state, int rank, bool saved_only);

// The plain-I/O baselines: `bytes` written as one new file (8 MiB calls,
// then fsync when `sync`), and a whole file read back into `into`
// sequentially -- 8 MiB calls, or with `crc` 256 KiB preads each followed
// by CRC32C over its bytes while they are in the core's cache (the verified
// read a checking load cannot beat).
absl::Status WritePlainFile(const std::string& path, const std::vector<char>& bytes, bool sync);
absl::Status ReadPlainFile(const std::string& path, std::vector<char>& into, bool crc);

}  // namespace shardlight::tools::bench

#endif  // SHARDLIGHT_TOOLS_BENCH_BENCH_WORKLOAD_H_
