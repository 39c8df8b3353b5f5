// TorchBuild: one LibTorch build as shardlight sees it, from three sources
// that can disagree:
//  - the headers this binary was compiled against (TORCH_VERSION_MAJOR/MINOR/
//    PATCH of <torch/version.h>) and the torch.__version__-style version string;
//  - the loaded library's own description, at::show_config() (BuildSettings);
//  - the c10d backends compiled in (USE_C10D_GLOO/NCCL/MPI) and, for each, the
//    symbols the loaded library really exports: the backend class and the
//    ProcessGroup collectives it overrides.
// TorchBuild::Current() gathers these for the running process; tests build
// fake ones from plain TorchBuildParts. Warnings() lists the disagreements.
//
// Errors: FromParts/Current return InvalidArgument when the show_config text is
// malformed (see build_settings.h). A malformed version string is *not* an
// error: it only explains, so it is kept as version()'s status and warned about.
#ifndef SHARDLIGHT_LIGHTNING_GATE_TORCH_BUILD_H_
#define SHARDLIGHT_LIGHTNING_GATE_TORCH_BUILD_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lightning/gate/build_settings.h"
#include "lightning/gate/torch_version.h"

namespace shardlight::lightning {

enum class C10dBackend { kGloo, kNccl, kMpi };
// "gloo", "nccl", "mpi": the names ProcessGroup::getBackendName() uses.
absl::string_view BackendName(C10dBackend backend);

// The ProcessGroup collectives shardlight's sharded code calls, in probe order.
const std::vector<std::string>& RequiredCollectives();

// Whether the loaded library exports c10d::ProcessGroup<Backend> (its typeinfo)
// and that class's own override of `collective` (a RequiredCollectives() name),
// looked up by mangled name with dlsym. CurrentParts() relies on this for NCCL
// and MPI, whose headers need nccl.h / mpi.h and cannot be compiled here.
bool LibraryExportsBackendClass(C10dBackend backend);
bool LibraryExportsCollective(C10dBackend backend, absl::string_view collective);

// A c10d backend compiled into this binary.
struct BackendBuild {
  C10dBackend backend = C10dBackend::kGloo;
  // The loaded library exports the backend class (its typeinfo symbol).
  bool library_has_class = true;
  // ProcessGroup collectives the library's backend class implements itself
  // (not the base class's "does not support" stub), by RequiredCollectives() name.
  std::vector<std::string> collectives;
};

struct HeaderVersion {
  int major = 0;
  int minor = 0;
  int patch = 0;
};

// Everything that describes a build, as plain data: what Current() gathers and
// what tests inject.
struct TorchBuildParts {
  // torch.__version__-style ("1.10.0a0+ecc3718"). C++ has no such string at
  // run time; for the real build it is the headers' TORCH_VERSION.
  std::string version_string;
  HeaderVersion headers;
  std::string show_config;  // at::show_config() text
  std::vector<BackendBuild> backends;
};

class TorchBuild {
 public:
  static absl::StatusOr<TorchBuild> FromParts(TorchBuildParts parts);
  // The running process: compile-time headers, at::show_config(), backends
  // from USE_C10D_* checked against the loaded library's symbols.
  static TorchBuildParts CurrentParts();
  static absl::StatusOr<TorchBuild> Current() { return FromParts(CurrentParts()); }

  const TorchBuildParts& parts() const { return parts_; }
  const std::string& version_string() const { return parts_.version_string; }
  // The version string parsed; an error when it is not PEP 440.
  const absl::StatusOr<TorchVersion>& version() const { return version_; }
  const HeaderVersion& headers() const { return parts_.headers; }
  const BuildSettings& settings() const { return settings_; }
  // TORCH_VERSION= of the loaded library.
  const TorchVersion& library_version() const { return settings_.torch_version; }
  const std::vector<BackendBuild>& backends() const { return parts_.backends; }
  // The backend if compiled in, else nullptr.
  const BackendBuild* Backend(C10dBackend backend) const;
  // The backend if compiled in, its class exported by the library, and not
  // switched off in the library's settings (USE_NCCL/USE_MPI=OFF); else nullptr.
  const BackendBuild* UsableBackend(C10dBackend backend) const;
  // Headers and library agree on major.minor (the ABI boundary).
  bool HeadersMatchLibrary() const;
  // The release the library was built from when its CXX_FLAGS name a source
  // tree ("-ffile-prefix-map=/build/.../pytorch-1.13.1+dfsg=." in Debian's);
  // empty when they do not.
  std::string SourceTreeVersion() const;

  // Human-readable disagreements between the sources above; empty when all agree.
  std::vector<std::string> Warnings() const;

 private:
  TorchBuild(TorchBuildParts parts, BuildSettings settings);

  TorchBuildParts parts_;
  BuildSettings settings_;
  absl::StatusOr<TorchVersion> version_;
};

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_GATE_TORCH_BUILD_H_
