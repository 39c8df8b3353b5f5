// Timing and memory sampling shared by the checkpoint benchmarks: a phase runs
// on every thread-rank between barriers and rank 0 times it; repeats keep the
// best time and the worst memory; the page cache of a directory can be
// dropped before a read phase.
#ifndef SHARDLIGHT_TOOLS_BENCH_BENCH_PHASES_H_
#define SHARDLIGHT_TOOLS_BENCH_BENCH_PHASES_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::tools::bench {

// /proc/self/status fields in bytes ("VmHWM", "VmRSS"); -1 when absent.
int64_t ProcStatus(const char* field);

// Resets VmHWM to the current RSS (Linux >= 4.0); false when it cannot.
bool ResetPeak();

// fdatasync + POSIX_FADV_DONTNEED on every file of `dir`: later reads come
// from the device.
void DropCache(const std::string& dir);

// What rank 0 measures between two barriers.
struct Phase {
  double seconds = 0;
  int64_t rss_before = 0;  // process RSS when the phase starts
  int64_t peak = 0;        // VmHWM at its end
  bool peak_reset = true;  // whether VmHWM could be reset at the start
  int64_t extra() const { return peak - rss_before; }
};

// Repeats of one phase: the best time, and the worst memory.
struct Measure {
  std::vector<Phase> runs;
  double seconds() const;
  const Phase& worst_memory() const;
};

// Runs `body` (returning absl::Status) on every rank between barriers; rank
// 0 times it, samples RSS and appends the phase to `m`.
template <typename F>
absl::Status TimedInto(simulate::RankContext& ctx, Measure* m, F&& body) {
  ctx.pg->barrier()->wait();
  Phase phase;
  std::chrono::steady_clock::time_point start;
  if (ctx.rank == 0) {
    phase.peak_reset = ResetPeak();
    phase.rss_before = ProcStatus("VmRSS");
    start = std::chrono::steady_clock::now();
  }
  ctx.pg->barrier()->wait();
  absl::Status s = std::forward<F>(body)();
  ctx.pg->barrier()->wait();
  if (ctx.rank == 0) {
    phase.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    phase.peak = ProcStatus("VmHWM");
    m->runs.push_back(phase);
  }
  return s;
}

}  // namespace shardlight::tools::bench

#endif  // SHARDLIGHT_TOOLS_BENCH_BENCH_PHASES_H_
