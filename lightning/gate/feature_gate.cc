#include "lightning/gate/feature_gate.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardlight::lightning {
namespace {

constexpr absl::string_view kOn = "ShardedTensor state-dict hooks are on: ";
constexpr absl::string_view kOff = "ShardedTensor state-dict hooks are off: ";
// The release that first had ShardedTensor state-dict hooks (PyTorch 1.10):
// what a version check would compare against.
constexpr int kHooksMajor = 1;
constexpr int kHooksMinor = 10;

// What a naive version gate does: compare major.minor only, so pre-releases
// and local builds of 1.10 pass.
bool NaiveCheckPasses(const TorchVersion& v) {
  return std::make_pair(v.Major(), v.Minor()) >= std::make_pair<int64_t, int64_t>(kHooksMajor, kHooksMinor);
}

bool Has(const std::vector<std::string>& names, absl::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::vector<std::string> MissingCollectives(const Capabilities& caps) {
  std::vector<std::string> out;
  const std::pair<const char*, bool> kFields[] = {
      {"allgather", caps.allgather}, {"alltoall_base", caps.alltoall_base}, {"broadcast", caps.broadcast},
      {"gather", caps.gather},       {"scatter", caps.scatter},             {"barrier", caps.barrier}};
  for (const auto& [name, present] : kFields) {
    if (!present) out.push_back(name);
  }
  return out;
}

std::string CompiledBackends(const TorchBuild& build) {
  std::vector<std::string> names;
  for (const BackendBuild& b : build.backends()) {
    names.push_back(absl::StrCat(BackendName(b.backend), b.library_has_class ? "" : " (not in the library)"));
  }
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

// One clause per missing capability, for the reason sentence.
std::string ExplainMissing(const TorchBuild& build, const Capabilities& caps) {
  std::vector<std::string> clauses;
  if (!caps.c10d_backend) {
    clauses.push_back(absl::StrCat("no usable c10d backend (Gloo or NCCL compiled in and present in the library; "
                                   "compiled in: ",
                                   CompiledBackends(build), ")"));
  }
  if (!caps.headers_match_library) {
    clauses.push_back(absl::StrCat("headers are ", build.headers().major, ".", build.headers().minor,
                                   " but the library is ", build.library_version().ToString()));
  }
  if (caps.backend) {
    std::vector<std::string> lacking = MissingCollectives(caps);
    if (!lacking.empty()) {
      clauses.push_back(
          absl::StrCat("the ", BackendName(*caps.backend), " backend lacks ", absl::StrJoin(lacking, ", ")));
    }
  }
  return absl::StrJoin(clauses, "; ");
}

std::string Kind(const TorchVersion& v) {
  std::string base = v.BaseVersion().ToString();
  std::string kind;
  if (v.pre()) {
    static constexpr const char* kNames[] = {"alpha", "beta", "release candidate"};
    kind = absl::StrCat("a pre-release (", kNames[static_cast<int>(v.pre()->kind)], " ", v.pre()->number, ") of ",
                        base);
  } else if (v.IsDevRelease()) {
    kind = absl::StrCat("a dev (nightly) build of ", base);
  } else {
    kind = absl::StrCat("release ", base);
  }
  if (v.post()) absl::StrAppend(&kind, ", post-release ", *v.post());
  if (v.pre() && v.IsDevRelease()) absl::StrAppend(&kind, ", dev ", *v.dev());
  if (v.HasLocal()) absl::StrAppend(&kind, ", local label '", v.Local(), "'");
  if (v.pre() && v.HasLocal()) absl::StrAppend(&kind, " (NGC-style source build)");
  return kind;
}

}  // namespace

GateEnvironment GateEnvironment::FromProcess() {
  GateEnvironment env;
  if (const char* value = std::getenv(kDisableShardedEnv)) env.disable_sharded = value;
  return env;
}

bool GateEnvironment::DisablesSharded() const {
  if (!disable_sharded) return false;
  std::string v = absl::AsciiStrToLower(absl::StripAsciiWhitespace(*disable_sharded));
  return !(v.empty() || v == "0" || v == "false" || v == "no" || v == "off");
}

Capabilities CapabilitiesOf(const TorchBuild& build) {
  Capabilities caps;
  const BackendBuild* chosen = build.UsableBackend(C10dBackend::kNccl);
  if (chosen == nullptr) chosen = build.UsableBackend(C10dBackend::kGloo);
  caps.headers_match_library = build.HeadersMatchLibrary();
  if (chosen == nullptr) return caps;
  caps.backend = chosen->backend;
  caps.c10d_backend = true;
  const std::vector<std::string>& c = chosen->collectives;
  caps.allgather = Has(c, "allgather");
  caps.alltoall_base = Has(c, "alltoall_base");
  caps.broadcast = Has(c, "broadcast");
  caps.gather = Has(c, "gather");
  caps.scatter = Has(c, "scatter");
  caps.barrier = Has(c, "barrier");
  return caps;
}

std::vector<std::string> MissingCapabilities(const Capabilities& caps) {
  std::vector<std::string> out;
  if (!caps.c10d_backend) out.push_back("c10d_backend");
  if (!caps.headers_match_library) out.push_back("headers_match_library");
  if (caps.backend) {
    for (std::string& name : MissingCollectives(caps)) out.push_back(std::move(name));
  }
  return out;
}

std::string ExplainVersion(const TorchBuild& build) {
  const absl::StatusOr<TorchVersion>& v = build.version();
  if (!v.ok()) {
    return absl::StrCat("version string \"", absl::CHexEscape(build.version_string()),
                        "\" is not PEP 440, so no version check could even run");
  }
  bool naive = NaiveCheckPasses(*v);
  TorchVersion first = *ParseTorchVersion(absl::StrCat(kHooksMajor, ".", kHooksMinor, ".0"));
  bool strict = *v >= first;
  std::string out = absl::StrCat(v->ToString(), " is ", Kind(*v), "; a naive major.minor >= ", kHooksMajor, ".",
                                 kHooksMinor, " check ", naive ? "passes" : "fails");
  if (strict != naive) {
    absl::StrAppend(&out, ", a PEP 440 >= ", first.ToString(), " check ", strict ? "passes" : "fails");
  }
  return out;
}

FeatureDecision DecideShardedSupport(const TorchBuild& build, const GateEnvironment& env) {
  FeatureDecision d;
  Capabilities caps = CapabilitiesOf(build);
  d.missing = MissingCapabilities(caps);
  bool capable = d.missing.empty();
  bool version_passes = build.version().ok() && NaiveCheckPasses(*build.version());
  d.version_note = ExplainVersion(build);
  if (env.DisablesSharded()) {
    d.reason = absl::StrCat(kOff, kDisableShardedEnv, "=", *env.disable_sharded, " is set");
    absl::StrAppend(&d.version_note, "; the environment decided");
    return d;
  }
  d.sharded_supported = capable;
  if (capable) {
    d.reason = absl::StrCat(kOn, "the ", BackendName(*caps.backend), " backend implements ",
                            absl::StrJoin(RequiredCollectives(), ", "));
  } else {
    d.reason = absl::StrCat(kOff, ExplainMissing(build, caps));
  }
  if (!build.version().ok()) {
    absl::StrAppend(&d.version_note, "; capabilities decided");
  } else if (capable == version_passes) {
    absl::StrAppend(&d.version_note, "; capabilities decided, and agree");
  } else if (version_passes) {
    absl::StrAppend(&d.version_note, "; a version check would have passed, but ", absl::StrJoin(d.missing, ", "),
                    d.missing.size() == 1 ? " is" : " are", " missing");
  } else {
    absl::StrAppend(&d.version_note, "; a version check would have failed, yet every capability is present");
  }
  return d;
}

FeatureDecision DecideShardedSupportFor(const absl::StatusOr<TorchBuild>& build, const GateEnvironment& env) {
  if (build.ok()) return DecideShardedSupport(*build, env);
  FeatureDecision d;
  d.reason = absl::StrCat(kOff, "the LibTorch build cannot be described: ", build.status().message());
  d.missing = {"build_description"};
  d.version_note = "no version consulted: the build description failed first";
  return d;
}

const FeatureDecision& ShardedFeature() {
  static const FeatureDecision* decision =
      new FeatureDecision(DecideShardedSupportFor(TorchBuild::Current(), GateEnvironment::FromProcess()));
  return *decision;
}

}  // namespace shardlight::lightning
