// A benchmark process as one rank of a launcher's job (torchrun, mpirun,
// Slurm's srun): what process_bench and dcp_compare_rank start with.
#ifndef SHARDLIGHT_TOOLS_BENCH_LAUNCHER_JOB_H_
#define SHARDLIGHT_TOOLS_BENCH_LAUNCHER_JOB_H_

#include <chrono>
#include <memory>
#include <string>

#include "lightning/cluster/distributed.h"

namespace shardlight::tools::bench {

// The placement from the environment, then the world group (Gloo, every
// collective bounded by `collective_timeout`). On failure prints
// "<program>: <error>" to stderr and returns null with *exit_code 2 when the
// environment names no job, 1 when joining it failed.
std::unique_ptr<lightning::cluster::DistributedContext> JoinLauncherJob(const std::string& program,
                                                                       std::chrono::milliseconds collective_timeout,
                                                                       int* exit_code);

}  // namespace shardlight::tools::bench

#endif  // SHARDLIGHT_TOOLS_BENCH_LAUNCHER_JOB_H_
