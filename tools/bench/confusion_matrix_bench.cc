// Confusion-matrix state per rank and Sync time at W = 1, 2, 4, 8, 16 for a
// large class count (default 10^4: a 10^8-element int64 matrix). Prints only;
// the machines are shared, so nothing here is asserted.
//   bazel run -c opt //tools/bench:confusion_matrix_bench -- [classes] [samples]
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <ATen/CPUGeneratorImpl.h>

#include "lightning/metrics/confusion_matrix.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

using shardlight::lightning::metrics::ConfusionMatrix;
using shardlight::simulate::RankContext;
using shardlight::simulate::SimulatedCluster;

int main(int argc, char** argv) {
  const int64_t classes = argc > 1 ? std::atoll(argv[1]) : 10000;
  const int64_t samples = argc > 2 ? std::atoll(argv[2]) : 1000000;
  std::printf("classes %lld, samples %lld (global), int64 counts; full matrix %.1f MiB\n",
              static_cast<long long>(classes), static_cast<long long>(samples),
              classes * classes * 8.0 / (1 << 20));
  std::printf("%4s %16s %16s %12s\n", "W", "max MiB/rank", "full/W MiB", "sync ms");
  for (int w : {1, 2, 4, 8, 16}) {
    SimulatedCluster cluster(w);
    auto got = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::pair<int64_t, double>> {
      SL_ASSIGN_OR_RETURN(auto cm, ConfusionMatrix::Create(classes));
      SL_RETURN_IF_ERROR(cm->Bind(ctx.pg));
      const int64_t n = samples / w;
      auto gen = at::detail::createCPUGenerator(ctx.rank + 1);
      const at::Tensor target = at::randint(classes, {n}, gen, at::kLong);
      SL_RETURN_IF_ERROR(cm->Update(at::randint(classes, {n}, gen, at::kLong), target));
      const auto start = std::chrono::steady_clock::now();
      SL_RETURN_IF_ERROR(cm->Sync());
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      return std::make_pair(cm->StateBytes(), ms);
    });
    if (!got.ok()) {
      std::fprintf(stderr, "W=%d: %s\n", w, got.status().ToString().c_str());
      return 1;
    }
    int64_t max_bytes = 0;
    double max_ms = 0;
    for (const auto& [bytes, ms] : *got) {
      max_bytes = std::max(max_bytes, bytes);
      max_ms = std::max(max_ms, ms);
    }
    std::printf("%4d %16.1f %16.1f %12.1f\n", w, max_bytes / double(1 << 20),
                classes * classes * 8.0 / w / (1 << 20), max_ms);
  }
  return 0;
}
