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

// The uneven all-to-all of one flat buffer each way (1.x: alltoall_base;
// 2.x renamed it all_to_all_single and deprecated the old name). Collective.
c10::intrusive_ptr<c10d::Work> AllToAllSingle(c10d::ProcessGroup& pg, at::Tensor& output, at::Tensor& input,
                                              std::vector<int64_t>& output_splits,
                                              std::vector<int64_t>& input_splits);

// The Backend method that implements it: "alltoall_base" (1.x) or
// "all_to_all_single" (2.x; alltoall_base stays as a deprecated alias that
// the backends no longer override). The gate looks backends up by it.
std::string AllToAllMethod();
// Whether ProcessGroupGloo's headers declare its own override of that method.
bool GlooOverridesAllToAll();

// Gloo transport devices (ProcessGroupGloo's own factories).
std::shared_ptr<gloo::transport::Device> NewGlooDeviceForInterface(const std::string& interface);
std::shared_ptr<gloo::transport::Device> NewGlooDeviceForHostname(const std::string& hostname);

// Whether NCCL is compiled in (a CUDA LibTorch: USE_C10D_NCCL).
bool HasNccl();

// An NCCL group over `store` (CUDA tensors). Only with HasNccl(); otherwise
// throws c10::Error saying the build has no NCCL.
c10::intrusive_ptr<c10d::ProcessGroup> NewNcclGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int size, std::chrono::milliseconds timeout);

}  // namespace shardlight::sharded::compat

#endif  // SHARDLIGHT_SHARDED_COMPAT_C10D_COMPAT_H_
