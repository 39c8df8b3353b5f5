// TorchBuild::CurrentParts(): what this process can know about its LibTorch
// without a process group: the headers it was compiled against, the loaded
// library's at::show_config(), and the c10d symbols the library exports.
#include <dlfcn.h>

#include <type_traits>

#include <ATen/Version.h>
#include <torch/version.h>

#include "absl/strings/str_cat.h"
#include "lightning/gate/torch_build.h"
#include "sharded/compat/c10d_compat.h"

#ifdef USE_C10D_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

namespace shardlight::lightning {
namespace {

// Itanium-mangled parameter lists of the collectives, after
// "_ZN4c10d<len><Class><len><method>". They follow from ProcessGroup's virtual
// signatures alone: the backend class is a single substitution candidate, so
// one tail fits every backend class. The uneven all-to-all's method changed
// its name in 2.x (compat::AllToAllMethod()); its parameters did not.
struct MangledCollective {
  const char* name;  // as RequiredCollectives() names it
  const char* params;
};
constexpr MangledCollective kMangled[] = {
    {"allgather", "ERSt6vectorIS1_IN2at6TensorESaIS3_EESaIS5_EERS5_RKNS_16AllgatherOptionsE"},
    {"alltoall_base", "ERN2at6TensorES3_RSt6vectorIlSaIlEES7_RKNS_15AllToAllOptionsE"},
    {"broadcast", "ERSt6vectorIN2at6TensorESaIS3_EERKNS_16BroadcastOptionsE"},
    {"gather", "ERSt6vectorIS1_IN2at6TensorESaIS3_EESaIS5_EERS5_RKNS_13GatherOptionsE"},
    {"scatter", "ERSt6vectorIN2at6TensorESaIS3_EERS1_IS5_SaIS5_EERKNS_14ScatterOptionsE"},
    {"barrier", "ERKNS_14BarrierOptionsE"},
};

std::string MangledTail(const MangledCollective& m) {
  std::string method = absl::string_view(m.name) == "alltoall_base" ? sharded::compat::AllToAllMethod() : m.name;
  return absl::StrCat(method.size(), method, m.params);
}

std::string ClassName(C10dBackend backend) {
  switch (backend) {
    case C10dBackend::kGloo: return "ProcessGroupGloo";
    case C10dBackend::kNccl: return "ProcessGroupNCCL";
    case C10dBackend::kMpi: return "ProcessGroupMPI";
  }
  return "";
}

bool HasSymbol(const std::string& symbol) { return dlsym(RTLD_DEFAULT, symbol.c_str()) != nullptr; }

#ifdef USE_C10D_GLOO
// A member pointer named through the derived class still has the type of the
// class that declares the member: Impl only when Impl overrides it.
template <typename Impl, typename C, typename R, typename... A>
constexpr bool DeclaredIn(R (C::*)(A...)) {
  return std::is_same_v<C, Impl>;
}
using Gloo = c10d::ProcessGroupGloo;
const std::pair<const char*, bool> kGlooOverrides[] = {
    {"allgather", DeclaredIn<Gloo>(&Gloo::allgather)},
    {"alltoall_base", sharded::compat::GlooOverridesAllToAll()},
    {"broadcast", DeclaredIn<Gloo>(&Gloo::broadcast)},
    {"gather", DeclaredIn<Gloo>(&Gloo::gather)},
    {"scatter", DeclaredIn<Gloo>(&Gloo::scatter)},
    {"barrier", DeclaredIn<Gloo>(&Gloo::barrier)},
};
#endif

[[maybe_unused]] BackendBuild FromLibrary(C10dBackend backend) {
  BackendBuild out;
  out.backend = backend;
  out.library_has_class = LibraryExportsBackendClass(backend);
  for (const MangledCollective& m : kMangled) {
    if (LibraryExportsCollective(backend, m.name)) out.collectives.push_back(m.name);
  }
  return out;
}

}  // namespace

bool LibraryExportsBackendClass(C10dBackend backend) {
  std::string cls = ClassName(backend);
  return HasSymbol(absl::StrCat("_ZTIN4c10d", cls.size(), cls, "E"));  // typeinfo for c10d::<cls>
}

bool LibraryExportsCollective(C10dBackend backend, absl::string_view collective) {
  std::string cls = ClassName(backend);
  for (const MangledCollective& m : kMangled) {
    if (collective == m.name) return HasSymbol(absl::StrCat("_ZN4c10d", cls.size(), cls, MangledTail(m)));
  }
  return false;
}

TorchBuildParts TorchBuild::CurrentParts() {
  TorchBuildParts parts;
  parts.version_string = TORCH_VERSION;
  parts.headers = {TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH};
  parts.show_config = at::show_config();
#ifdef USE_C10D_GLOO
  // Linked against, so the overrides the headers declare are present.
  BackendBuild gloo;
  gloo.backend = C10dBackend::kGloo;
  gloo.library_has_class = LibraryExportsBackendClass(C10dBackend::kGloo);
  for (const auto& [name, overridden] : kGlooOverrides) {
    if (overridden) gloo.collectives.push_back(name);
  }
  parts.backends.push_back(std::move(gloo));
#endif
#ifdef USE_C10D_NCCL
  parts.backends.push_back(FromLibrary(C10dBackend::kNccl));
#endif
#ifdef USE_C10D_MPI
  parts.backends.push_back(FromLibrary(C10dBackend::kMpi));
#endif
  return parts;
}

}  // namespace shardlight::lightning
