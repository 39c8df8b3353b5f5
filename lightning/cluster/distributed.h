// Process-group setup from a cluster environment: the real-process
// counterpart of SimulatedCluster. Rank 0 (or the launcher's agent) serves a
// c10d::TCPStore at the master address, every rank joins it, and the ranks
// build their process group over it: Gloo on CPU, NCCL on a CUDA build when
// the device is a GPU. Everything above this (ShardedTensor, the Trainer,
// checkpoints) sees only the c10d::ProcessGroup and cannot tell a process
// from a thread-rank.
//
// Errors name the address and port and what timed out: the store that never
// answered, the ranks that never joined the rendezvous, the group that could
// not connect. Every wait is bounded by an explicit timeout.
#ifndef SHARDLIGHT_LIGHTNING_CLUSTER_DISTRIBUTED_H_
#define SHARDLIGHT_LIGHTNING_CLUSTER_DISTRIBUTED_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lightning/cluster/environment.h"
#include "sharded/process_groups.h"
#include "sharded/rank_monitor.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace shardlight::lightning::cluster {

struct DistributedOptions {
  // How long ranks wait for the store and for every rank to join.
  std::chrono::milliseconds rendezvous_timeout{std::chrono::minutes(5)};
  // Bound on every collective of the group.
  std::chrono::milliseconds collective_timeout{std::chrono::seconds(30)};
  // "gloo", "nccl", or "auto": nccl when `device` is "cuda", else gloo.
  std::string backend = "auto";
  // "cpu" or "cuda" (the GPU is local_rank's).
  std::string device = "cpu";
  // Gloo's network interface; "": the one that routes to the master address
  // ($GLOO_SOCKET_IFNAME, as in PyTorch, is read by the caller if it wishes).
  std::string gloo_interface;
};

// One process's membership of the job. Keep it alive while the group is used;
// Leave() (or the destructor) waits, bounded, for every rank to finish before
// rank 0 stops serving the store.
class DistributedContext {
 public:
  ~DistributedContext();
  const ProcessPlacement& placement() const { return placement_; }
  const c10::intrusive_ptr<c10d::ProcessGroup>& pg() const { return pg_; }
  const std::string& backend() const { return backend_; }
  // The job's store (its namespace for this job), from which more groups can
  // be made collectively -- a DeviceMesh's sub-groups (sharded/mesh/), as the
  // simulator makes them from its HashStore -- and where the world group's
  // Gloo binds (its device or address), so that those groups use the same
  // network. With the nccl backend the Gloo options are the loopback default.
  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }
  const sharded::GlooGroupOptions& gloo_options() const { return gloo_; }
  // Further Gloo groups over the same processes, from the job's store under
  // their own prefix (an AsyncCheckpointer's, for one).
  const std::shared_ptr<const sharded::GroupFactory>& groups() const { return groups_; }
  // Every rank announces that it is done; rank 0, when it serves the store,
  // waits for the others (up to `max_wait`, default the collective timeout)
  // before the store goes away -- also after a failure, so that its peers can
  // still read the store to name the rank that failed: there, until every
  // survivor has read the record of the first loss (RankMonitor).
  absl::Status Leave(std::optional<std::chrono::milliseconds> max_wait = std::nullopt);

 private:
  friend absl::StatusOr<std::unique_ptr<DistributedContext>> InitDistributed(const ProcessPlacement&,
                                                                             const DistributedOptions&);
  DistributedContext() = default;
  ProcessPlacement placement_;
  DistributedOptions options_;
  std::string backend_;
  c10::intrusive_ptr<c10d::Store> store_;  // the group's namespace in the job's store
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  sharded::GlooGroupOptions gloo_;
  std::shared_ptr<const sharded::GroupFactory> groups_;
  std::unique_ptr<sharded::RankMonitor::Attachment> monitor_;
  bool left_ = false;
};

// Collective over every process of the job.
absl::StatusOr<std::unique_ptr<DistributedContext>> InitDistributed(const ProcessPlacement& placement,
                                                                   const DistributedOptions& options = {});

// The local IPv4/IPv6 address this host uses to reach `host` (no packet is
// sent): where Gloo should listen so that peers can reach it.
absl::StatusOr<std::string> LocalAddressToward(const std::string& host, int port);

}  // namespace shardlight::lightning::cluster

#endif  // SHARDLIGHT_LIGHTNING_CLUSTER_DISTRIBUTED_H_
