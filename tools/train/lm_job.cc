#include "tools/train/lm_job.h"

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "absl/strings/str_join.h"

namespace shardlight::tools {

sharded::mesh::MeshContext MeshContextOf(const lightning::cluster::ProcessPlacement& placement,
                                         lightning::cluster::DistributedContext& ctx, std::chrono::milliseconds timeout) {
  sharded::mesh::MeshContext mesh_ctx;
  mesh_ctx.store = ctx.store();
  mesh_ctx.rank = placement.rank;
  mesh_ctx.world_size = placement.world_size;
  mesh_ctx.world = ctx.pg();
  mesh_ctx.timeout = timeout;
  mesh_ctx.gloo_device = ctx.gloo_options().device;
  mesh_ctx.gloo_bind_address = ctx.gloo_options().bind_address;
  return mesh_ctx;
}

int RunLmJobRank(simulate::LmJobOptions job, const lightning::cluster::ProcessPlacement& placement,
                 lightning::cluster::DistributedContext& ctx, std::chrono::milliseconds timeout) {
  job.log = &std::cout;
  auto result = simulate::RunLmRank(job, MeshContextOf(placement, ctx, timeout));
  if (!result.ok()) {
    std::cerr << "train: rank " << placement.rank << ": " << result.status() << "\n" << std::flush;
    (void)ctx.Leave(std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(10)));
    return 1;
  }
  std::ostringstream line;
  line << std::fixed << std::setprecision(6) << "train: rank " << placement.rank << "/" << placement.world_size
       << " lm mesh " << absl::StrJoin(job.mesh_shape, "x") << " start_step " << result->start_step << " steps "
       << result->losses.size();
  if (!result->losses.empty()) line << " last_loss " << result->losses.back();
  line << std::setprecision(1) << " tokens_per_s " << result->tokens_per_second << " state_bytes "
       << result->state_bytes << " peak_rss_bytes " << result->peak_rss_bytes;
  std::cout << line.str() << "\n" << std::flush;
  if (job.phase_times != nullptr) {
    std::cout << "train: rank " << placement.rank << "/" << placement.world_size << " phase_times "
              << job.phase_times->PerStepLine() << "\n"
              << std::flush;
  }
  if (auto left = ctx.Leave(); !left.ok()) {
    std::cerr << "train: rank " << placement.rank << ": " << left << "\n";
    return 1;
  }
  if (placement.rank == 0) {
    std::cout << std::fixed << std::setprecision(4) << "train: lm job of " << placement.world_size
              << " processes on a " << absl::StrJoin(job.mesh_shape, "x") << " mesh: held-out perplexity "
              << result->eval_perplexity << "\n"
              << std::flush;
  }
  return 0;
}

}  // namespace shardlight::tools
