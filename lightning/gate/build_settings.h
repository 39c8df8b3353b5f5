// BuildSettings: the "Build settings:" line of at::show_config(), the loaded
// LibTorch library's own description of how it was built.
//
// The line is one comma-separated list of KEY=VALUE entries, e.g.
//   "  - Build settings: BLAS_INFO=generic, ..., TORCH_VERSION=1.13.0,
//    USE_CUDA=OFF, USE_EXCEPTION_PTR=1, USE_MPI=OFF, USE_NCCL=OFF, ..., "
// Values may contain spaces (CXX_FLAGS), so an entry ends only where ", KEY="
// begins the next one. TORCH_VERSION carries major.minor.patch only (never a
// pre-release or local label), and the line has no USE_DISTRIBUTED entry:
// which c10d backends exist is not described here (see torch_build.h).
//
// ParseBuildSettings returns InvalidArgument (never crashes) when the text has
// no "Build settings:" line, an entry is not KEY=VALUE, a key repeats,
// TORCH_VERSION is missing or not a version, or a USE_* value is not one of
// ON/OFF/1/0/TRUE/FALSE/YES/NO.
#ifndef SHARDLIGHT_LIGHTNING_GATE_BUILD_SETTINGS_H_
#define SHARDLIGHT_LIGHTNING_GATE_BUILD_SETTINGS_H_

#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lightning/gate/torch_version.h"

namespace shardlight::lightning {

struct BuildSettings {
  TorchVersion torch_version;                  // TORCH_VERSION=
  std::map<std::string, bool> use_flags;       // every USE_* entry, e.g. "USE_CUDA" -> false
  std::map<std::string, std::string> entries;  // every entry as written, values trimmed

  // The USE_* flag `name`, or nullopt when the library does not mention it.
  std::optional<bool> Flag(absl::string_view name) const;
  // The entry `key` as written, or nullopt.
  std::optional<std::string> Entry(absl::string_view key) const;
};

absl::StatusOr<BuildSettings> ParseBuildSettings(absl::string_view show_config);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_GATE_BUILD_SETTINGS_H_
