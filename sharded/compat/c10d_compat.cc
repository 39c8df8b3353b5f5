#include "sharded/compat/c10d_compat.h"

#include <type_traits>

#include <c10/util/Exception.h>
#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace shardlight::sharded::compat {
namespace {

#if TORCH_VERSION_MAJOR >= 2
// 2.x: a ProcessGroup front that dispatches `device_type` tensors to `backend`
// (as torch.distributed's new_group does: default backend, then the backend).
c10::intrusive_ptr<c10d::ProcessGroup> Front(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                             c10::DeviceType device_type, c10d::ProcessGroup::BackendType type,
                                             c10::intrusive_ptr<c10d::Backend> backend) {
  auto pg = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  pg->setDefaultBackend(type);
  pg->setBackend(device_type, type, backend);
  return pg;
}
#endif

// The class that declares a member function (a member pointer named through a
// derived class keeps the declaring class: the derived one only when it
// overrides).
template <typename T>
struct MemberClassOf;
template <typename C, typename R, typename... A>
struct MemberClassOf<R (C::*)(A...)> {
  using type = C;
};
template <typename T>
using MemberClass = typename MemberClassOf<T>::type;

// Whether a group class names its uneven all-to-all `all_to_all_single`
// (2.15 does) or `alltoall_base` (1.13 to at least 2.11): read from the
// headers, not the version number.
template <typename Group, typename = void>
struct NamesAllToAllSingle : std::false_type {};
template <typename Group>
struct NamesAllToAllSingle<Group, std::void_t<decltype(&Group::all_to_all_single)>> : std::true_type {};

template <typename Group>
c10::intrusive_ptr<c10d::Work> CallAllToAll(Group& pg, at::Tensor& output, at::Tensor& input,
                                            std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits) {
  if constexpr (NamesAllToAllSingle<Group>::value) {
    return pg.all_to_all_single(output, input, output_splits, input_splits);
  } else {
    return pg.alltoall_base(output, input, output_splits, input_splits);
  }
}

template <typename Gloo>
bool GlooDeclaresAllToAll() {
  if constexpr (NamesAllToAllSingle<Gloo>::value) {
    return std::is_same_v<MemberClass<decltype(&Gloo::all_to_all_single)>, Gloo>;
  } else {
    return std::is_same_v<MemberClass<decltype(&Gloo::alltoall_base)>, Gloo>;
  }
}

}  // namespace

std::string HeaderVersion() { return TORCH_VERSION; }

bool GroupsDispatchToBackends() { return TORCH_VERSION_MAJOR >= 2; }

c10::intrusive_ptr<c10d::ProcessGroup> NewGlooGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int size, std::chrono::milliseconds timeout, int threads,
                                                    std::shared_ptr<gloo::transport::Device> device) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(std::move(device));
  options->threads = threads;
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
#if TORCH_VERSION_MAJOR >= 2
  return Front(store, rank, size, c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
#else
  return gloo;
#endif
}

c10::intrusive_ptr<c10d::Work> AllToAllSingle(c10d::ProcessGroup& pg, at::Tensor& output, at::Tensor& input,
                                              std::vector<int64_t>& output_splits,
                                              std::vector<int64_t>& input_splits) {
  return CallAllToAll(pg, output, input, output_splits, input_splits);
}

std::string AllToAllMethod() {
  return NamesAllToAllSingle<c10d::ProcessGroupGloo>::value ? "all_to_all_single" : "alltoall_base";
}

bool GlooOverridesAllToAll() { return GlooDeclaresAllToAll<c10d::ProcessGroupGloo>(); }

std::shared_ptr<gloo::transport::Device> NewGlooDeviceForInterface(const std::string& interface) {
  return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
}

std::shared_ptr<gloo::transport::Device> NewGlooDeviceForHostname(const std::string& hostname) {
  return c10d::ProcessGroupGloo::createDeviceForHostname(hostname);
}

bool HasNccl() {
#ifdef USE_C10D_NCCL
  return true;
#else
  return false;
#endif
}

c10::intrusive_ptr<c10d::ProcessGroup> NewNcclGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int size, std::chrono::milliseconds timeout,
                                                    std::shared_ptr<gloo::transport::Device> cpu_device,
                                                    int cpu_threads) {
#ifdef USE_C10D_NCCL
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
#if TORCH_VERSION_MAJOR >= 2
  auto pg = Front(store, rank, size, c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
  // CPU tensors (agreements, host metadata) over Gloo, under its own prefix
  // of the store, as torch's "cpu:gloo,cuda:nccl".
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(timeout);
  gloo_options->devices.push_back(std::move(cpu_device));
  gloo_options->threads = cpu_threads;
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("cpu/", store), rank,
                                                          size, gloo_options);
  pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
  return pg;
#else
  (void)cpu_device;
  (void)cpu_threads;
  return nccl;
#endif
#else
  (void)store;
  (void)rank;
  (void)size;
  (void)timeout;
  (void)cpu_device;
  (void)cpu_threads;
  TORCH_CHECK(false, "this LibTorch has no NCCL (not a CUDA build)");
#endif
}

}  // namespace shardlight::sharded::compat
