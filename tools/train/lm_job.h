// --job=lm of //tools/train: one rank of the LM job (simulate/lm_run.h) in
// this process, its mesh's sub-groups made from the job's store. Prints the
// rank's line ("train: rank R/W lm mesh DxT start_step S steps N last_loss
// L tokens_per_s T state_bytes B peak_rss_bytes P") and, on rank 0, each
// step's loss when log_every > 0 ("lm: step K loss L perplexity P") and the
// held-out perplexity; with job.phase_times, also "train: rank R/W phase_times
// ..." (PhaseTimes::PerStepLine). Returns the process exit code (0, or 1 on failure with
// the error on stderr).
#ifndef SHARDLIGHT_TOOLS_TRAIN_LM_JOB_H_
#define SHARDLIGHT_TOOLS_TRAIN_LM_JOB_H_

#include <chrono>

#include "lightning/cluster/distributed.h"
#include "lightning/cluster/environment.h"
#include "simulate/lm_run.h"

namespace shardlight::tools {

// The MeshContext of this process's rank: sub-groups from the job's store,
// bound where the world group's Gloo binds.
sharded::mesh::MeshContext MeshContextOf(const lightning::cluster::ProcessPlacement& placement,
                                         lightning::cluster::DistributedContext& ctx, std::chrono::milliseconds timeout);

int RunLmJobRank(simulate::LmJobOptions job, const lightning::cluster::ProcessPlacement& placement,
                 lightning::cluster::DistributedContext& ctx, std::chrono::milliseconds timeout);

}  // namespace shardlight::tools

#endif  // SHARDLIGHT_TOOLS_TRAIN_LM_JOB_H_
