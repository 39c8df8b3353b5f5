// Process-group construction in one place, for every LibTorch this builds
// against, with errors as statuses. What differs between LibTorch 1.x and 2.x
// (groups that are backends, or fronts over them) is sharded/compat's; CI
// builds and tests both (Debian's 1.13, the torch 2.x wheel).
#ifndef SHARDLIGHT_SHARDED_PROCESS_GROUPS_H_
#define SHARDLIGHT_SHARDED_PROCESS_GROUPS_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace gloo::transport {
class Device;
}

namespace shardlight::sharded {

struct GlooGroupOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};  // every collective
  int threads = 2;
  // The transport device; null: one bound to `bind_address`.
  std::shared_ptr<gloo::transport::Device> device;
  std::string bind_address = "127.0.0.1";  // an IP or host name of this machine
};

// Collective over `store` (every rank of the group calls it): connects the
// full mesh. Unavailable naming the bind address or the store wait that failed.
absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> MakeGlooGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                                      int rank, int size,
                                                                      const GlooGroupOptions& options);

// Further groups over the same ranks as a job's main group, each from the
// job's store under its own prefix ("groups/<n>-<name>/"): what a part that must
// never share the trainer's group (a background checkpoint writer) builds its
// own from. SimulatedCluster (RankContext::groups) and DistributedContext
// (groups()) each hand one out per rank, made with their main group's Gloo
// options, so the same code runs on thread-ranks and on processes. Gloo only:
// the extra groups move host bytes, whatever the main group's backend.
class GroupFactory {
 public:
  GroupFactory(c10::intrusive_ptr<c10d::Store> store, int rank, int size, GlooGroupOptions options)
      : store_(std::move(store)), rank_(rank), size_(size), options_(std::move(options)) {}
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Collective over every rank of the job: every rank makes its groups in
  // the same order (the n-th Make of each rank meets the others' n-th under
  // "groups/<n>-<name>/", so a name may be used again, e.g. by each Fit).
  // InvalidArgument for an empty name, else MakeGlooGroup's errors.
  absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> Make(const std::string& name) const;

 private:
  mutable std::atomic<int64_t> made_{0};
  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int size_;
  GlooGroupOptions options_;
};

// A Gloo device bound to an interface by name ("eth0") or to an address.
absl::StatusOr<std::shared_ptr<gloo::transport::Device>> GlooDeviceForInterface(const std::string& interface);
absl::StatusOr<std::shared_ptr<gloo::transport::Device>> GlooDeviceForAddress(const std::string& address);

// Whether this build has NCCL (a CUDA LibTorch: USE_C10D_NCCL).
bool HasNccl();

// NCCL over `store` for CUDA tensors, and (LibTorch 2.x) Gloo with `cpu`'s
// device for the CPU tensors of the same group: the agreements every
// collective part makes are host strings ("cpu:gloo,cuda:nccl"; its timeout is
// `timeout`). The default `cpu` binds 127.0.0.1: one host only. Collective.
// FailedPrecondition when the build has no NCCL; InvalidArgument when the
// Gloo device cannot be made; Unavailable when the group cannot be created.
absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> MakeNcclGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                                      int rank, int size,
                                                                      std::chrono::milliseconds timeout,
                                                                      const GlooGroupOptions& cpu = {});

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_PROCESS_GROUPS_H_
