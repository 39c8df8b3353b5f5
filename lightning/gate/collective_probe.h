// ProbeCollectives: proves, on a live process group, that every collective
// shardlight's sharded code needs works (RequiredCollectives(): allgather,
// alltoall_base, broadcast, gather, scatter, barrier), by running each with a
// tiny tensor and checking the result. It is the second half of feature gating
// (feature_gate.h decides before any group exists); the Trainer runs it when it
// sets the group up and stops, before creating sharded state, if it fails.
//
// Collective: every rank calls it, in the same order. Errors:
//  - InvalidArgument: timeout is not positive.
//  - FailedPrecondition "collective probe: <name> failed: <why>": the first
//    collective that threw (e.g. "does not support alltoall_base"), did not
//    finish within `timeout`, or returned wrong data. After a failure ranks may
//    be out of step: discard the group.
#ifndef SHARDLIGHT_LIGHTNING_GATE_COLLECTIVE_PROBE_H_
#define SHARDLIGHT_LIGHTNING_GATE_COLLECTIVE_PROBE_H_

#include <chrono>

#include "absl/status/status.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::lightning {

// `device` holds the probe tensors: CPU for Gloo, a CUDA device for NCCL.
absl::Status ProbeCollectives(c10d::ProcessGroup& pg, std::chrono::milliseconds timeout,
                              at::Device device = at::kCPU);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_GATE_COLLECTIVE_PROBE_H_
