// c10d across LibTorch versions, in one place. LibTorch 1.x's
// ProcessGroupGloo/ProcessGroupNCCL are ProcessGroups; 2.x made them
// c10d::Backend objects that a ProcessGroup dispatches to by device type.
// Callers get a c10d::ProcessGroup either way and never test the version.
//
// Errors: these throw what c10d throws (c10::Error: a peer that never
// connects, a bad device); callers wrap them with sharded::NoThrow.
#ifndef SHARDLIGHT_SHARDED_COMPAT_C10D_COMPAT_H_
#define SHARDLIGHT_SHARDED_COMPAT_C10D_COMPAT_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace gloo::transport {
class Device;
}

namespace shardlight::sharded::compat {

// The LibTorch these headers are ("2.15.0"), and whether c10d groups are
// ProcessGroup fronts over Backend objects (2.x) or the backends themselves.
std::string HeaderVersion();
bool GroupsDispatchToBackends();

// A Gloo group over `store` (collective: every rank calls it): CPU tensors.
c10::intrusive_ptr<c10d::ProcessGroup> NewGlooGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int size, std::chrono::milliseconds timeout, int threads,
                                                    std::shared_ptr<gloo::transport::Device> device);

// The uneven all-to-all of one flat buffer each way (alltoall_base up to 2.11
// at least; 2.15 names it all_to_all_single, the old name deprecated). Collective.
c10::intrusive_ptr<c10d::Work> AllToAllSingle(c10d::ProcessGroup& pg, at::Tensor& output, at::Tensor& input,
                                              std::vector<int64_t>& output_splits,
                                              std::vector<int64_t>& input_splits);

// The Backend method that implements it: "alltoall_base" (1.13 to 2.11 at
// least) or "all_to_all_single" (2.15; alltoall_base stays as a deprecated
// alias that the backends no longer override), read from the headers'
// declarations, not the version. The gate looks backends up by it.
std::string AllToAllMethod();
// Whether ProcessGroupGloo's headers declare its own override of that method.
bool GlooOverridesAllToAll();

// Gloo transport devices (ProcessGroupGloo's own factories).
std::shared_ptr<gloo::transport::Device> NewGlooDeviceForInterface(const std::string& interface);
std::shared_ptr<gloo::transport::Device> NewGlooDeviceForHostname(const std::string& hostname);

// Whether NCCL is compiled in (a CUDA LibTorch: USE_C10D_NCCL).
bool HasNccl();

// An NCCL group over `store` for CUDA tensors; on 2.x the same group sends
// CPU tensors (the agreements' strings, host metadata) over Gloo on
// `cpu_device` ("cpu:gloo,cuda:nccl"); on 1.x CPU tensors are not supported.
// Only with HasNccl(); otherwise throws c10::Error saying the build has no NCCL.
c10::intrusive_ptr<c10d::ProcessGroup> NewNcclGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int size, std::chrono::milliseconds timeout,
                                                    std::shared_ptr<gloo::transport::Device> cpu_device,
                                                    int cpu_threads);

}  // namespace shardlight::sharded::compat

#endif  // SHARDLIGHT_SHARDED_COMPAT_C10D_COMPAT_H_
