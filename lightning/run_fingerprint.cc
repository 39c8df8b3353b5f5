#include "lightning/run_fingerprint.h"

#include <c10/core/ScalarType.h>

#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lightning/state_dict_hooks.h"
#include "sharded/stable_hash.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {
namespace {

namespace ckpt = sharded::checkpoint;

constexpr char kStructure[] = "structure";
constexpr char kSeed[] = "seed";
constexpr char kModelPrefix[] = "model.";

std::string Describe(c10::ScalarType dtype, const std::vector<int64_t>& shape) {
  return absl::StrCat(c10::toString(dtype), "[", absl::StrJoin(shape, ", "), "]");
}

// The first model key whose description differs, as "key 'k': A there, B here".
std::string FirstStructureDifference(const ckpt::CheckpointIndex& index, const RunFingerprint& run) {
  std::map<std::string, std::string> there;
  for (const ckpt::IndexTensor& t : index.tensors) {
    if (t.key.rfind(kModelPrefix, 0) == 0) there[t.key.substr(sizeof(kModelPrefix) - 1)] = Describe(t.dtype, t.shape);
  }
  for (const auto& [key, here] : run.structure) {
    auto it = there.find(key);
    if (it == there.end()) return absl::StrCat("key '", key, "' (", here, ") only here");
    if (it->second != here) return absl::StrCat("key '", key, "': ", it->second, " there, ", here, " here");
    there.erase(it);
  }
  if (!there.empty()) return absl::StrCat("key '", there.begin()->first, "' (", there.begin()->second, ") only there");
  return "";
}

}  // namespace

absl::StatusOr<RunFingerprint> FingerprintRun(LightningModule& module, uint64_t seed,
                                              const std::map<std::string, std::string>& run_options) {
  RunFingerprint run;
  SL_ASSIGN_OR_RETURN(const sharded::StateDict dict, StateDictOf(module));
  uint64_t h = sharded::kStableHashSeed;
  for (const auto& [key, value] : dict.entries()) {
    std::string what;
    if (const auto* dense = std::get_if<at::Tensor>(&value)) {
      what = Describe(dense->scalar_type(), dense->sizes().vec());
    } else {
      const auto& st = std::get<sharded::ShardedTensor>(value);
      what = Describe(st.dtype(), st.sizes());
    }
    h = sharded::StableHash(what, sharded::StableHash(key, h));
    run.structure.emplace_back(key, std::move(what));
  }
  for (const auto& [name, value] : run_options) {
    if (name == kStructure || name == kSeed) {
      return absl::InvalidArgumentError(absl::StrCat("run_options may not set \"", name, "\": the Trainer records it"));
    }
    run.record[name] = value;
  }
  run.record[kStructure] = absl::StrCat(absl::Hex(h, absl::kZeroPad16));
  run.record[kSeed] = absl::StrCat(seed);
  if (absl::Status s = ckpt::ValidateRunRecord(run.record); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("run_options: ", s.message()));
  }
  return run;
}

std::string DescribeRunDifference(const ckpt::CheckpointIndex& index, const RunFingerprint& run) {
  if (index.run.empty()) return "";
  ckpt::RunRecord saved = index.run, current = run.record;
  std::vector<std::string> parts;
  if (saved[kStructure] != current[kStructure]) {
    const std::string first = FirstStructureDifference(index, run);
    parts.push_back(absl::StrCat("model structure differs", first.empty() ? "" : absl::StrCat(" (", first, ")")));
  }
  saved.erase(kStructure);
  current.erase(kStructure);
  if (std::string rest = ckpt::DescribeRunDifference(saved, current); !rest.empty()) parts.push_back(rest);
  return absl::StrJoin(parts, "; ");
}

}  // namespace shardlight::lightning
