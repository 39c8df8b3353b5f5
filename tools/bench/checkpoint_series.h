// One point of the checkpoint benchmark series: W thread-ranks save and load
// N small tensors of mixed sizes -- alternately chunk-sharded on dim 0 (so
// some ranks hold empty shards) and dense -- timed beside plain sequential
// file I/O of the same bytes, measured in the same run. What
// `checkpoint_bench --tensors=N1,N2,...` prints and `checkpoint_report`
// charts: the time per tensor must stay flat as N grows.
#ifndef SHARDLIGHT_TOOLS_BENCH_CHECKPOINT_SERIES_H_
#define SHARDLIGHT_TOOLS_BENCH_CHECKPOINT_SERIES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace shardlight::tools::bench {

struct SeriesConfig {
  int tensors = 1000;
  int world_size = 4;
  // Tensor t has shape kShapes[t % 4] with its rows times `scale`
  // ([2, 2], [8, 8], [16, 32], [64, 32] floats at scale 1: 2.6 KiB average).
  int scale = 1;
  std::string dir;  // its ckpt/ and plain/ are replaced
  bool drop_cache = false;
  int repeats = 3;
  int64_t block_bytes = 256 << 10;
  int64_t buffer_bytes = 16 << 20;
};

// Best of `repeats` for every phase; all ranks together.
struct SeriesPoint {
  int tensors = 0;
  int world_size = 0;
  int64_t bytes = 0;  // the state's bytes (each dense tensor once)
  double save_s = 0, load_s = 0;
  // Pieces one load reads, all ranks together: one per overlap of a saved
  // shard with a destination box (LoadStats::pieces_read); here every piece
  // is a whole shard or dense tensor.
  int64_t pieces = 0;
  // Process CPU time (user + sys, every thread) of the best save and load.
  double save_cpu_s = 0, load_cpu_s = 0;
  // Each rank writes (then fsyncs) and reads its own bytes as one file.
  double plain_write_s = 0, plain_read_s = 0;
  double save_per_tensor_us() const { return save_s * 1e6 / tensors; }
  double load_per_tensor_us() const { return load_s * 1e6 / tensors; }
  double load_per_piece_us() const { return pieces ? load_s * 1e6 / pieces : 0; }
  double load_cpu_per_piece_us() const { return pieces ? load_cpu_s * 1e6 / pieces : 0; }
  // Checkpoint throughput over plain I/O throughput of the same bytes.
  double save_ratio() const { return plain_write_s / save_s; }
  double load_ratio() const { return plain_read_s / load_s; }
};

// Runs one point; the loaded values are checked after every load.
absl::StatusOr<SeriesPoint> MeasureSeriesPoint(const SeriesConfig& config);

}  // namespace shardlight::tools::bench

#endif  // SHARDLIGHT_TOOLS_BENCH_CHECKPOINT_SERIES_H_
