// Slurm's compressed host lists ("node[01-04,07]", "a1,b[2-3]-ib",
// "rack[1-2]-n[01-02]"), as SLURM_JOB_NODELIST carries them.
#ifndef SHARDLIGHT_LIGHTNING_CLUSTER_SLURM_HOSTLIST_H_
#define SHARDLIGHT_LIGHTNING_CLUSTER_SLURM_HOSTLIST_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardlight::lightning::cluster {

// Expands a host list in order. InvalidArgument naming the list and the
// position for an empty host, unbalanced brackets, a bad or descending range;
// ResourceExhausted when it would expand to more than `max_hosts` hosts.
absl::StatusOr<std::vector<std::string>> ExpandSlurmHostlist(absl::string_view list, size_t max_hosts = 1 << 16);

// The first host of the list (where Slurm places task 0 by default).
absl::StatusOr<std::string> FirstSlurmHost(absl::string_view list);

}  // namespace shardlight::lightning::cluster

#endif  // SHARDLIGHT_LIGHTNING_CLUSTER_SLURM_HOSTLIST_H_
