// Process-group construction in one place, for every LibTorch this builds
// against. LibTorch 1.x's ProcessGroupGloo/ProcessGroupNCCL are ProcessGroups;
// 2.x turned them into c10d::Backend objects that a ProcessGroup dispatches
// to. Callers get a c10d::ProcessGroup either way; the difference is gated on
// TORCH_VERSION_MAJOR at compile time. (Only the 1.x branch is compiled by
// this repository's CI, against Debian's LibTorch 1.13.)
#ifndef SHARDLIGHT_SHARDED_PROCESS_GROUPS_H_
#define SHARDLIGHT_SHARDED_PROCESS_GROUPS_H_

#include <chrono>
#include <memory>
#include <string>

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

// A Gloo device bound to an interface by name ("eth0") or to an address.
absl::StatusOr<std::shared_ptr<gloo::transport::Device>> GlooDeviceForInterface(const std::string& interface);
absl::StatusOr<std::shared_ptr<gloo::transport::Device>> GlooDeviceForAddress(const std::string& address);

// Whether this build has NCCL (a CUDA LibTorch: USE_C10D_NCCL).
bool HasNccl();

// NCCL over `store`; FailedPrecondition when the build has no NCCL.
absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> MakeNcclGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                                      int rank, int size,
                                                                      std::chrono::milliseconds timeout);

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_PROCESS_GROUPS_H_
