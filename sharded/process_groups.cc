#include "sharded/process_groups.h"

#include "absl/strings/str_cat.h"
#include "sharded/no_throw.h"
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace shardlight::sharded {
namespace {

#if TORCH_VERSION_MAJOR >= 2
// 2.x: a ProcessGroup that dispatches `device_type` tensors to `backend`.
c10::intrusive_ptr<c10d::ProcessGroup> Wrap(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                            const std::string& name, std::chrono::milliseconds timeout,
                                            c10::DeviceType device_type, c10d::ProcessGroup::BackendType type,
                                            c10::intrusive_ptr<c10d::Backend> backend) {
  auto options = c10::make_intrusive<c10d::ProcessGroup::Options>(name, timeout);
  auto pg = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size, options);
  pg->setBackend(device_type, type, backend);
  return pg;
}
#endif

}  // namespace

absl::StatusOr<std::shared_ptr<gloo::transport::Device>> GlooDeviceForInterface(const std::string& interface) {
  auto device = NoThrow([&]() -> absl::StatusOr<std::shared_ptr<gloo::transport::Device>> {
    return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
  });
  if (device.ok()) return device;
  return absl::InvalidArgumentError(
      absl::StrCat("no Gloo device for interface '", interface, "': ", device.status().message()));
}

absl::StatusOr<std::shared_ptr<gloo::transport::Device>> GlooDeviceForAddress(const std::string& address) {
  auto device = NoThrow([&]() -> absl::StatusOr<std::shared_ptr<gloo::transport::Device>> {
    return c10d::ProcessGroupGloo::createDeviceForHostname(address);
  });
  if (device.ok()) return device;
  return absl::InvalidArgumentError(absl::StrCat("no Gloo device bound to '", address, "': ", device.status().message()));
}

absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> MakeGlooGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                                      int rank, int size,
                                                                      const GlooGroupOptions& options) {
  auto device = options.device;
  if (!device) {
    auto made = GlooDeviceForAddress(options.bind_address);
    if (!made.ok()) return made.status();
    device = *made;
  }
  auto pg = NoThrow([&]() -> absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> {
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
    gloo_options->devices.push_back(device);
    gloo_options->threads = options.threads;
    auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, gloo_options);
#if TORCH_VERSION_MAJOR >= 2
    return Wrap(store, rank, size, "gloo", options.timeout, c10::DeviceType::CPU,
                c10d::ProcessGroup::BackendType::GLOO, gloo);
#else
    return c10::intrusive_ptr<c10d::ProcessGroup>(gloo);
#endif
  });
  if (pg.ok()) return pg;
  return absl::UnavailableError(absl::StrCat("rank ", rank, " of ", size, " could not connect its Gloo group: ",
                                             pg.status().message()));
}

absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> GroupFactory::Make(const std::string& name) const {
  if (name.empty()) return absl::InvalidArgumentError("a process group from the factory needs a name");
  auto store = c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("groups/", made_++, "-", name, "/"), store_);
  auto pg = MakeGlooGroup(store, rank_, size_, options_);
  if (!pg.ok()) {
    return absl::Status(pg.status().code(), absl::StrCat("process group '", name, "': ", pg.status().message()));
  }
  return pg;
}

bool HasNccl() {
#ifdef USE_C10D_NCCL
  return true;
#else
  return false;
#endif
}

absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> MakeNcclGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                                      int rank, int size,
                                                                      std::chrono::milliseconds timeout) {
#ifdef USE_C10D_NCCL
  auto pg = NoThrow([&]() -> absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> {
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
#if TORCH_VERSION_MAJOR >= 2
    return Wrap(store, rank, size, "nccl", timeout, c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
#else
    return c10::intrusive_ptr<c10d::ProcessGroup>(nccl);
#endif
  });
  if (pg.ok()) return pg;
  return absl::UnavailableError(
      absl::StrCat("rank ", rank, " of ", size, " could not create its NCCL group: ", pg.status().message()));
#else
  (void)store;
  (void)rank;
  (void)size;
  (void)timeout;
  return absl::FailedPreconditionError(
      "this LibTorch has no NCCL (not a CUDA build); use the gloo backend, or build with SHARDLIGHT_LIBTORCH "
      "pointing at a CUDA LibTorch");
#endif
}

}  // namespace shardlight::sharded
