#include "sharded/process_groups.h"

#include "absl/strings/str_cat.h"
#include "sharded/compat/c10d_compat.h"
#include "sharded/no_throw.h"
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

namespace shardlight::sharded {

absl::StatusOr<std::shared_ptr<gloo::transport::Device>> GlooDeviceForInterface(const std::string& interface) {
  auto device = NoThrow([&]() -> absl::StatusOr<std::shared_ptr<gloo::transport::Device>> {
    return compat::NewGlooDeviceForInterface(interface);
  });
  if (device.ok()) return device;
  return absl::InvalidArgumentError(
      absl::StrCat("no Gloo device for interface '", interface, "': ", device.status().message()));
}

absl::StatusOr<std::shared_ptr<gloo::transport::Device>> GlooDeviceForAddress(const std::string& address) {
  auto device = NoThrow([&]() -> absl::StatusOr<std::shared_ptr<gloo::transport::Device>> {
    return compat::NewGlooDeviceForHostname(address);
  });
  if (device.ok()) return device;
  return absl::InvalidArgumentError(absl::StrCat("no Gloo device bound to '", address, "': ", device.status().message()));
}

namespace {

// The options' device, else one bound to their address.
absl::StatusOr<std::shared_ptr<gloo::transport::Device>> GlooDeviceFor(const GlooGroupOptions& options) {
  if (options.device) return options.device;
  return GlooDeviceForAddress(options.bind_address);
}

}  // namespace

absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> MakeGlooGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                                      int rank, int size,
                                                                      const GlooGroupOptions& options) {
  auto device = GlooDeviceFor(options);
  if (!device.ok()) return device.status();
  auto pg = NoThrow([&]() -> absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> {
    return compat::NewGlooGroup(store, rank, size, options.timeout, options.threads, *device);
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

bool HasNccl() { return compat::HasNccl(); }

absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> MakeNcclGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                                      int rank, int size,
                                                                      std::chrono::milliseconds timeout,
                                                                      const GlooGroupOptions& cpu) {
  if (!HasNccl()) {
    return absl::FailedPreconditionError(
        "this LibTorch has no NCCL (not a CUDA build); use the gloo backend, or build against a CUDA LibTorch "
        "(--config=torch2 or SHARDLIGHT_LIBTORCH; README.md, \"Which LibTorch\")");
  }
  auto device = GlooDeviceFor(cpu);
  if (!device.ok()) return device.status();
  auto pg = NoThrow([&]() -> absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> {
    return compat::NewNcclGroup(store, rank, size, timeout, *device, cpu.threads);
  });
  if (pg.ok()) return pg;
  return absl::UnavailableError(
      absl::StrCat("rank ", rank, " of ", size, " could not create its NCCL group: ", pg.status().message()));
}

}  // namespace shardlight::sharded
