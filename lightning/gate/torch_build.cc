#include "lightning/gate/torch_build.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {
namespace {

std::string Dotted(const HeaderVersion& v) { return absl::StrFormat("%d.%d.%d", v.major, v.minor, v.patch); }

bool SameRelease(const TorchVersion& a, const TorchVersion& b) {
  return a.epoch() == b.epoch() && a.BaseVersion() == b.BaseVersion();
}

// The macro that compiles a backend in, and the show_config flag that says
// the library was built with it (Gloo has none: USE_DISTRIBUTED is not listed).
struct BackendNames {
  const char* macro;
  const char* library_flag;
  const char* cxx_class;
};
BackendNames NamesOf(C10dBackend backend) {
  switch (backend) {
    case C10dBackend::kGloo: return {"USE_C10D_GLOO", nullptr, "c10d::ProcessGroupGloo"};
    case C10dBackend::kNccl: return {"USE_C10D_NCCL", "USE_NCCL", "c10d::ProcessGroupNCCL"};
    case C10dBackend::kMpi: return {"USE_C10D_MPI", "USE_MPI", "c10d::ProcessGroupMPI"};
  }
  return {"?", nullptr, "?"};
}

}  // namespace

absl::string_view BackendName(C10dBackend backend) {
  switch (backend) {
    case C10dBackend::kGloo: return "gloo";
    case C10dBackend::kNccl: return "nccl";
    case C10dBackend::kMpi: return "mpi";
  }
  return "unknown";
}

const std::vector<std::string>& RequiredCollectives() {
  static const auto* kNames = new std::vector<std::string>{
      "allgather", "alltoall_base", "broadcast", "gather", "scatter", "barrier"};
  return *kNames;
}

TorchBuild::TorchBuild(TorchBuildParts parts, BuildSettings settings)
    : parts_(std::move(parts)),
      settings_(std::move(settings)),
      version_(ParseTorchVersion(parts_.version_string)) {}

absl::StatusOr<TorchBuild> TorchBuild::FromParts(TorchBuildParts parts) {
  SL_ASSIGN_OR_RETURN(BuildSettings settings, ParseBuildSettings(parts.show_config));
  return TorchBuild(std::move(parts), std::move(settings));
}

const BackendBuild* TorchBuild::Backend(C10dBackend backend) const {
  for (const BackendBuild& b : parts_.backends) {
    if (b.backend == backend) return &b;
  }
  return nullptr;
}

const BackendBuild* TorchBuild::UsableBackend(C10dBackend backend) const {
  const BackendBuild* b = Backend(backend);
  if (b == nullptr || !b->library_has_class) return nullptr;
  const char* flag = NamesOf(backend).library_flag;
  if (flag != nullptr && settings_.Flag(flag) == false) return nullptr;
  return b;
}

bool TorchBuild::HeadersMatchLibrary() const {
  return library_version().Major() == headers().major && library_version().Minor() == headers().minor;
}

std::string TorchBuild::SourceTreeVersion() const {
  std::string flags = settings_.Entry("CXX_FLAGS").value_or("");
  // The first ".../pytorch-<digit>..." path component: Debian's build dir is
  // /build/pytorch-XXXXXX/pytorch-1.13.1+dfsg.
  constexpr char kTree[] = "/pytorch-";
  for (size_t at = flags.find(kTree); at != std::string::npos; at = flags.find(kTree, at + 1)) {
    size_t start = at + sizeof(kTree) - 1;
    if (start >= flags.size() || !absl::ascii_isdigit(flags[start])) continue;
    size_t end = flags.find_first_of("=/ ,", start);
    return flags.substr(start, end == std::string::npos ? std::string::npos : end - start);
  }
  return "";
}

std::vector<std::string> TorchBuild::Warnings() const {
  std::vector<std::string> out;
  const TorchVersion& lib = library_version();
  if (!HeadersMatchLibrary()) {
    out.push_back(absl::StrCat("headers are LibTorch ", headers().major, ".", headers().minor,
                               " but the loaded library reports TORCH_VERSION=", lib.ToString(),
                               ": compiled against one LibTorch, running with another"));
  } else if (lib.Micro() != headers().patch) {
    out.push_back(absl::StrCat("headers say ", Dotted(headers()), " but the loaded library reports TORCH_VERSION=",
                               lib.ToString(), " (patch releases differ)"));
  }
  if (!version_.ok()) {
    out.push_back(absl::StrCat("version string is not PEP 440: ", version_.status().message()));
  } else if (!SameRelease(*version_, lib)) {
    out.push_back(absl::StrCat("version string ", version_string(), " names release ",
                               version_->BaseVersion().ToString(),
                               " but the loaded library reports TORCH_VERSION=", lib.ToString()));
  }
  if (std::string tree = SourceTreeVersion(); !tree.empty()) {
    absl::StatusOr<TorchVersion> tree_version = ParseTorchVersion(tree);
    if (tree_version.ok() && !SameRelease(*tree_version, lib)) {
      out.push_back(absl::StrCat("the library was built from pytorch-", tree, " sources but reports TORCH_VERSION=",
                                 lib.ToString(), ": its version file lags the release it packages"));
    }
  }
  for (const BackendBuild& b : parts_.backends) {
    BackendNames names = NamesOf(b.backend);
    if (!b.library_has_class) {
      out.push_back(absl::StrCat(names.macro, " is defined at compile time but the loaded library has no ",
                                 names.cxx_class));
    }
    if (names.library_flag != nullptr && settings_.Flag(names.library_flag) == false) {
      out.push_back(absl::StrCat(names.macro, " is defined at compile time but the library says ",
                                 names.library_flag, "=OFF"));
    }
  }
  return out;
}

}  // namespace shardlight::lightning
