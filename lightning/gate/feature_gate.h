// The feature gate: may a LightningModule register ShardedTensor state-dict
// hooks on this build? Decided by *capability*, never by version number.
//
// A module is constructed before any process group exists, so this decides
// from what is knowable without one (TorchBuild: compiled-in backends, the
// library's build description, exported symbols). The collectives themselves
// are exercised later by ProbeCollectives (collective_probe.h) once the
// Trainer has a group.
//
// The version string only explains the outcome in FeatureDecision::version_note:
// "1.10.0a0+ecc3718" (NGC 21.07) passes a naive ">= 1.10" check, yet its NCCL
// backend has no gather/scatter, which sharded code needs.
//
// SHARDLIGHT_DISABLE_SHARDED set to anything but ""/0/false/no/off turns the
// feature off, with the variable named in the reason. Nothing here returns an
// error: an undescribable build is a decision (off) with the error as reason.
#ifndef SHARDLIGHT_LIGHTNING_GATE_FEATURE_GATE_H_
#define SHARDLIGHT_LIGHTNING_GATE_FEATURE_GATE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lightning/gate/torch_build.h"

namespace shardlight::lightning {

inline constexpr char kDisableShardedEnv[] = "SHARDLIGHT_DISABLE_SHARDED";

// What shardlight's sharded code needs from a build. Each false field is
// reported under its own name in FeatureDecision::missing.
struct Capabilities {
  // The backend sharded code would run on: NCCL when usable (a CUDA build),
  // else Gloo; nullopt when neither is compiled in and present in the library.
  std::optional<C10dBackend> backend;
  bool c10d_backend = false;           // "c10d_backend": such a backend exists
  bool headers_match_library = false;  // "headers_match_library": same major.minor
  // The chosen backend implements the collective (names as RequiredCollectives()).
  bool allgather = false;
  bool alltoall_base = false;
  bool broadcast = false;
  bool gather = false;
  bool scatter = false;
  bool barrier = false;
};

Capabilities CapabilitiesOf(const TorchBuild& build);
// Names of the false capabilities, in declaration order. Without a backend the
// collectives are not listed (there is nothing to lack them).
std::vector<std::string> MissingCapabilities(const Capabilities& caps);

struct FeatureDecision {
  bool sharded_supported = false;
  std::string reason;                // one sentence: why on, or why off
  std::vector<std::string> missing;  // MissingCapabilities names; empty when all present
  std::string version_note;          // what the version string says, and why it did not decide
};

// The process environment, injectable for tests.
struct GateEnvironment {
  std::optional<std::string> disable_sharded;  // value of SHARDLIGHT_DISABLE_SHARDED, if set
  static GateEnvironment FromProcess();
  // The variable is set to a value that turns the feature off.
  bool DisablesSharded() const;
};

// Pure: the same inputs always give the same decision.
FeatureDecision DecideShardedSupport(const TorchBuild& build, const GateEnvironment& env = {});
// As above; a build that could not be described is off, with the error as
// reason and missing == {"build_description"}.
FeatureDecision DecideShardedSupportFor(const absl::StatusOr<TorchBuild>& build, const GateEnvironment& env);
// Explains the version string alone (used for version_note).
std::string ExplainVersion(const TorchBuild& build);

// The decision for this process's real build, made once at the first call
// (reading SHARDLIGHT_DISABLE_SHARDED then) and cached; thread-safe.
const FeatureDecision& ShardedFeature();

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_GATE_FEATURE_GATE_H_
