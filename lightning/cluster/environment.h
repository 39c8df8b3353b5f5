// Cluster environments: where this process sits in a job, read from the
// variables its launcher sets (Lightning's `ClusterEnvironment` idea).
//
// A launcher (torchrun, Slurm's srun, Open MPI's mpirun) starts one process
// per rank and describes the job in environment variables. Each
// ClusterEnvironment knows one launcher's variables: whether they are present
// (Detected) and what they say (Read). DetectEnvironment tries them in a fixed
// order -- torchrun, Open MPI, Slurm, then a single process -- because the
// more specific launcher wins when several leave variables behind (torchrun
// or mpirun started inside a Slurm allocation still see SLURM_*). Explicit
// overrides (command-line flags) replace what the variables say.
//
// Errors (InvalidArgument) name the variable and its value: a missing,
// non-numeric or out-of-range variable, or a contradiction such as RANK=4
// with WORLD_SIZE=4.
#ifndef SHARDLIGHT_LIGHTNING_CLUSTER_ENVIRONMENT_H_
#define SHARDLIGHT_LIGHTNING_CLUSTER_ENVIRONMENT_H_

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shardlight::lightning::cluster {

// Environment variables by name; ProcessEnvironment() reads this process's.
using EnvMap = std::map<std::string, std::string>;
EnvMap ProcessEnvironment();

// How the c10d TCPStore of the job is reached.
enum class StoreMode {
  kRankZeroHosts,  // rank 0 listens at master_addr:master_port, others connect
  kAgentHosts,     // a launcher agent already listens there (torchrun's static
                   // rendezvous): every rank is a client, keys under store_prefix
};

// One process's place in the job.
struct ProcessPlacement {
  std::string launcher;  // "torchrun", "slurm", "mpi", "single"
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int restart_count = 0;  // torchrun restarts of the worker group so far
  std::string run_id;     // the launcher's job id, if it has one
  StoreMode store_mode = StoreMode::kRankZeroHosts;
  std::string store_prefix;  // with kAgentHosts
};

class ClusterEnvironment {
 public:
  virtual ~ClusterEnvironment() = default;
  virtual std::string name() const = 0;
  // Whether this launcher's variables are present.
  virtual bool Detected(const EnvMap& env) const = 0;
  // What they say; InvalidArgument naming the variable when one is wrong.
  virtual absl::StatusOr<ProcessPlacement> Read(const EnvMap& env) const = 0;
};

// Every environment, in detection order: torchrun, mpi, slurm, single.
const std::vector<std::unique_ptr<ClusterEnvironment>>& AllEnvironments();

// Explicit settings; each one set replaces what the environment says.
struct PlacementOverrides {
  std::string launcher;  // "" or "auto": detect; else one of the names above
  std::optional<int> rank, world_size, local_rank;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
};

// The placement for this process: the named (or first detected) environment,
// then the overrides, then the cross-checks (rank < world size, port range).
absl::StatusOr<ProcessPlacement> DetectEnvironment(const EnvMap& env, const PlacementOverrides& overrides = {});

// One line for logs: "torchrun rank 1/4 (local 1/4, node 0), store 127.0.0.1:29500".
std::string Describe(const ProcessPlacement& placement);

// When one worker dies, a launcher stops the others with SIGTERM and, after a
// grace it chooses, SIGKILL. A rank learns which peer was lost only within
// its collective timeout (the rank monitor's heartbeat, then the store's
// record), so a grace shorter than that kills survivors before they can say
// it. Open MPI's mpirun waits odls_base_sigkill_timeout seconds (1 by
// default; its children see it as OMPI_MCA_odls_base_sigkill_timeout when it
// is set); torchrun waits 30 s. Returns a warning naming the setting to raise
// when this placement's launcher is known to wait less than `needed`,
// nullopt otherwise (or when the launcher's grace cannot be read from the
// environment: Slurm's KillWait is the cluster's setting).
std::optional<std::string> ShortKillGraceWarning(const ProcessPlacement& placement, const EnvMap& env,
                                                 std::chrono::milliseconds needed);

}  // namespace shardlight::lightning::cluster

#endif  // SHARDLIGHT_LIGHTNING_CLUSTER_ENVIRONMENT_H_
