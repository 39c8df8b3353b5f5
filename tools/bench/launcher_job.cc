#include "tools/bench/launcher_job.h"

#include <cstdio>

#include "lightning/cluster/environment.h"

namespace shardlight::tools::bench {

std::unique_ptr<lightning::cluster::DistributedContext> JoinLauncherJob(const std::string& program,
                                                                       std::chrono::milliseconds collective_timeout,
                                                                       int* exit_code) {
  auto placement = lightning::cluster::DetectEnvironment(lightning::cluster::ProcessEnvironment());
  if (!placement.ok()) {
    std::fprintf(stderr, "%s: %s\n", program.c_str(), placement.status().ToString().c_str());
    *exit_code = 2;
    return nullptr;
  }
  lightning::cluster::DistributedOptions options;
  options.collective_timeout = collective_timeout;
  auto job = lightning::cluster::InitDistributed(*placement, options);
  if (!job.ok()) {
    std::fprintf(stderr, "%s: rank %d: %s\n", program.c_str(), placement->rank, job.status().ToString().c_str());
    *exit_code = 1;
    return nullptr;
  }
  *exit_code = 0;
  return *std::move(job);
}

}  // namespace shardlight::tools::bench
