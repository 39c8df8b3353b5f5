// One LoadCheckpoint of a PyTorch DCP directory on W thread-ranks of one
// process (SimulatedCluster, Gloo), for tools/bench/dcp_load_bench.sh and
// the DCP streaming test: every tensor of the checkpoint's .metadata is a
// destination, row-sharded over the ranks (a ShardedTensor chunked along dim
// 0) when it has a dim and a dtype a ShardedTensor holds, else dense on every
// rank. Keys "layers.<k>.weight" (tests/interop/dcp_big_save.py) have the
// first and last element of each local shard checked against that script's
// formula. Prints one line:
//   seconds=<load wall time> destination_bytes=<all ranks> peak_rss_kib=<process>
//   dcp_load_run DCP_DIR W
#include <sys/resource.h>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/interop/dcp/dcp_checkpoint.h"
#include "sharded/factories.h"
#include "sharded/shard_metadata.h"
#include "sharded/state_dict.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace {

namespace cp = shardlight::sharded::checkpoint;
namespace sh = shardlight::sharded;

constexpr int64_t kCols = 1024;  // dcp_big_save.py's row length

// dcp_big_save.py's element (row, col) of key k.
float Expected(int64_t row, int64_t col, int64_t k) { return static_cast<float>((row * kCols + col) % 4093 + k); }

// The first and last element of each local shard of "layers.<k>.weight".
absl::Status CheckSamples(const std::string& key, const sh::ShardedTensor& st) {
  std::vector<absl::string_view> parts = absl::StrSplit(key, '.');
  int64_t k = 0;
  if (parts.size() != 3 || parts[0] != "layers" || !absl::SimpleAtoi(parts[1], &k) || st.sizes().size() != 2 ||
      st.sizes()[1] != kCols || st.dtype() != c10::ScalarType::Float) {
    return absl::OkStatus();
  }
  for (const sh::Shard& s : st.local_shards()) {
    const int64_t rows = s.metadata.sizes[0];
    if (rows == 0) continue;
    const int64_t first = s.metadata.offsets[0];
    const float got_first = s.tensor[0][0].item<float>();
    const float got_last = s.tensor[rows - 1][kCols - 1].item<float>();
    if (got_first != Expected(first, 0, k) || got_last != Expected(first + rows - 1, kCols - 1, k)) {
      return absl::InternalError(absl::StrCat("key '", key, "' rows from ", first, ": got ", got_first, " .. ",
                                              got_last, ", want ", Expected(first, 0, k), " .. ",
                                              Expected(first + rows - 1, kCols - 1, k)));
    }
  }
  return absl::OkStatus();
}

absl::Status Run(const std::string& dir, int world) {
  SL_ASSIGN_OR_RETURN(const cp::dcp::DcpMetadata md, cp::dcp::ReadDcpMetadata(dir, cp::PosixStorage()));
  std::vector<double> seconds(world, 0);
  std::vector<int64_t> bytes(world, 0);
  shardlight::simulate::SimulatedCluster cluster(world);
  SL_RETURN_IF_ERROR(cluster.Run([&](shardlight::simulate::RankContext& ctx) -> absl::Status {
    sh::StateDict fill;
    for (const cp::dcp::DcpTensor& t : md.tensors) {
      if (!t.size.empty() && sh::IsSupportedDtype(t.dtype)) {
        SL_ASSIGN_OR_RETURN(sh::ShardedTensor st,
                            sh::Zeros(sh::ChunkShardingSpec::OnRanks(0, world), t.size, {t.dtype, false}, ctx.pg));
        for (const sh::Shard& s : st.local_shards()) bytes[ctx.rank] += s.tensor.numel() * s.tensor.element_size();
        SL_RETURN_IF_ERROR(fill.Insert(t.key, std::move(st)));
      } else {
        at::Tensor dense = at::zeros(t.size, at::TensorOptions().dtype(t.dtype));
        bytes[ctx.rank] += dense.numel() * dense.element_size();
        SL_RETURN_IF_ERROR(fill.Insert(t.key, std::move(dense)));
      }
    }
    cp::LoadOptions options;
    options.strict = true;
    const auto start = std::chrono::steady_clock::now();
    SL_RETURN_IF_ERROR(cp::LoadCheckpoint(fill, dir, *ctx.pg, options));
    seconds[ctx.rank] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const auto& [key, value] : fill.entries()) {
      if (const auto* st = std::get_if<sh::ShardedTensor>(&value)) SL_RETURN_IF_ERROR(CheckSamples(key, *st));
    }
    return absl::OkStatus();
  }));
  double slowest = 0;
  int64_t total = 0;
  for (int r = 0; r < world; ++r) {
    slowest = std::max(slowest, seconds[r]);
    total += bytes[r];
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::cout << "seconds=" << slowest << " destination_bytes=" << total << " peak_rss_kib=" << usage.ru_maxrss << "\n";
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  int world = 0;
  if (argc != 3 || !absl::SimpleAtoi(argv[2], &world) || world < 1 || world > 64) {
    std::cerr << "usage: dcp_load_run DCP_DIR W (1..64)\n";
    return 2;
  }
  if (absl::Status s = Run(argv[1], world); !s.ok()) {
    std::cerr << "dcp_load_run: " << s << "\n";
    return 1;
  }
  return 0;
}
