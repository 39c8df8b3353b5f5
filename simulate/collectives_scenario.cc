// Scenario "collectives": the cluster's own health check. Every rank runs
// allreduce, allgather and broadcast over a 1 MiB tensor, checks the values,
// and reports its time per collective.
#include <ATen/ATen.h>

#include <chrono>
#include <iomanip>

#include "absl/strings/str_cat.h"
#include "simulate/collectives_scenario.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::simulate {
namespace {

struct RankReport {
  double allreduce_ms = 0, allgather_ms = 0, broadcast_ms = 0;
};

double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

absl::StatusOr<RankReport> RunRank(RankContext& ctx, int steps) {
  constexpr int64_t kElements = (1 << 20) / sizeof(float);
  const int w = ctx.world_size;
  RankReport report;
  for (int step = 0; step < steps; ++step) {
    std::vector<at::Tensor> t = {at::full({kElements}, ctx.rank + step, at::kFloat)};
    auto start = std::chrono::steady_clock::now();
    ctx.pg->allreduce(t)->wait();
    report.allreduce_ms += MillisSince(start);
    const float want = static_cast<float>(w) * (w - 1) / 2 + static_cast<float>(w) * step;
    if (t[0][kElements - 1].item<float>() != want) {
      return absl::DataLossError(absl::StrCat("allreduce at step ", step, " gave ",
                                              t[0][kElements - 1].item<float>(), ", want ", want));
    }

    std::vector<at::Tensor> in = {at::full({kElements / w + 1}, ctx.rank, at::kFloat)};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < w; ++r) out[0].push_back(at::empty_like(in[0]));
    start = std::chrono::steady_clock::now();
    ctx.pg->allgather(out, in)->wait();
    report.allgather_ms += MillisSince(start);
    for (int r = 0; r < w; ++r) {
      if (out[0][r][0].item<float>() != r) {
        return absl::DataLossError(absl::StrCat("allgather slot ", r, " holds the wrong rank's data"));
      }
    }

    std::vector<at::Tensor> b = {at::full({kElements}, ctx.rank == 0 ? step : -1, at::kFloat)};
    start = std::chrono::steady_clock::now();
    ctx.pg->broadcast(b)->wait();
    report.broadcast_ms += MillisSince(start);
    if (b[0][0].item<float>() != step) return absl::DataLossError("broadcast did not arrive");
  }
  report.allreduce_ms /= steps;
  report.allgather_ms /= steps;
  report.broadcast_ms /= steps;
  return report;
}

}  // namespace

absl::Status RunCollectivesScenario(const ScenarioOptions& options, std::ostream& out) {
  ClusterOptions cluster_options;
  cluster_options.collective_timeout = options.collective_timeout;
  SimulatedCluster cluster(options.world_size, cluster_options);
  const int steps = std::max(1, options.steps);
  auto reports = cluster.Run([&](RankContext& ctx) { return RunRank(ctx, steps); });
  if (!reports.ok()) return reports.status();
  out << "collectives: " << options.world_size << " ranks, " << steps
      << " rounds of 1 MiB allreduce/allgather/broadcast, all values checked\n";
  out << "rank  allreduce_ms  allgather_ms  broadcast_ms\n";
  for (int r = 0; r < options.world_size; ++r) {
    const RankReport& rep = (*reports)[r];
    out << std::setw(4) << r << std::fixed << std::setprecision(3) << std::setw(14)
        << rep.allreduce_ms << std::setw(14) << rep.allgather_ms << std::setw(14)
        << rep.broadcast_ms << "\n";
  }
  return absl::OkStatus();
}

}  // namespace shardlight::simulate
