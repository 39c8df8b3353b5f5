#include "sharded/checkpoint/roots/root_layout.h"

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "sharded/checkpoint/format/file_names.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {
namespace {

constexpr char kStepPrefix[] = "step-";
constexpr int64_t kMaxLatestBytes = 64;

}  // namespace

bool IsSaveOutput(absl::string_view name) { return name == kIndexFileName || IsCheckpointFileName(name); }

std::string StepDirName(int64_t step) { return absl::StrFormat("%s%06d", kStepPrefix, step); }

std::optional<int64_t> ParseStepDirName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kStepPrefix) || name.empty() || name.size() > 18) return std::nullopt;
  if (!std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_isdigit(c); })) return std::nullopt;
  int64_t step = 0;
  if (!absl::SimpleAtoi(name, &step)) return std::nullopt;
  return step;
}

std::vector<RootStep> RootListing::LoadCandidates() const {
  std::vector<RootStep> out;
  if (!broken_latest.empty()) {
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
      if (it->committed) out.push_back(*it);
    }
    return out;
  }
  if (!latest.has_value()) return out;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (it->step == *latest || (it->step < *latest && it->committed)) out.push_back(*it);
  }
  return out;
}

absl::StatusOr<RootListing> ScanCheckpointRoot(const std::string& root, Storage& storage) {
  RootListing listing;
  if (!storage.Exists(root)) return listing;
  SL_ASSIGN_OR_RETURN(const std::vector<std::string> names, storage.List(root));
  std::map<int64_t, std::string> claimed;
  for (const std::string& name : names) {
    const std::optional<int64_t> step = ParseStepDirName(name);
    if (!step.has_value()) continue;
    const auto [it, fresh] = claimed.emplace(*step, name);
    if (!fresh) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint root '", root, "': '", std::min(it->second, name),
                                                     "' and '", std::max(it->second, name), "' both claim step ", *step));
    }
    const std::string dir = JoinPath(root, name);
    absl::StatusOr<std::vector<std::string>> inside = storage.List(dir);
    if (!inside.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("'", dir, "' claims step ", *step, " but is not a checkpoint directory: ", inside.status().message()));
    }
    const bool committed = std::find(inside->begin(), inside->end(), kIndexFileName) != inside->end();
    if (!committed) {
      for (const std::string& file : *inside) {
        if (!IsSaveOutput(file)) {
          return absl::FailedPreconditionError(absl::StrCat("'", dir, "' claims step ", *step, " but is not a checkpoint: no ",
                                                            kIndexFileName, ", and it holds '", file,
                                                            "', which a checkpoint save does not write"));
        }
      }
    }
    listing.steps.push_back({*step, name, committed});
  }
  std::sort(listing.steps.begin(), listing.steps.end(),
            [](const RootStep& a, const RootStep& b) { return a.step < b.step; });

  const std::string latest_path = JoinPath(root, kLatestFileName);
  if (!storage.Exists(latest_path)) return listing;
  // Single-line: the reason travels as one line of a load's plan.
  const auto broken = [&](absl::string_view why) {
    listing.broken_latest = absl::StrReplaceAll(absl::StrCat("broken 'latest' pointer '", latest_path, "': ", why),
                                                {{"\n", " "}});
    return listing;
  };
  const absl::StatusOr<std::string> text = ReadWholeFile(storage, latest_path, kMaxLatestBytes);
  if (!text.ok()) return broken(text.status().message());
  const std::string name(absl::StripTrailingAsciiWhitespace(*text));
  const std::optional<int64_t> step = ParseStepDirName(name);
  if (!step.has_value()) {
    return broken(absl::StrCat("\"", absl::CHexEscape(name), "\" is not a step directory name (step-<digits>)"));
  }
  const auto it = claimed.find(*step);
  if (it == claimed.end() || it->second != name) {
    return broken(absl::StrCat("it names '", name, "', which is not in the root"));
  }
  listing.latest = *step;
  return listing;
}

bool IsCheckpointRoot(const std::string& root, Storage* storage) {
  return StorageOrDefault(storage).Exists(JoinPath(root, kLatestFileName));
}

absl::StatusOr<RootLoadPlan> RootLoadCandidates(const std::string& root, Storage& storage) {
  SL_ASSIGN_OR_RETURN(const RootListing listing, ScanCheckpointRoot(root, storage));
  if (!listing.latest.has_value() && listing.broken_latest.empty()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint in '", root, "': it has no '", kLatestFileName, "' pointer"));
  }
  RootLoadPlan plan;
  plan.broken_latest = listing.broken_latest;
  for (const RootStep& s : listing.LoadCandidates()) plan.candidates.emplace_back(s.step, s.name);
  return plan;
}

absl::StatusOr<RootLoadResult> TryRootCandidates(const std::string& root, const RootLoadPlan& plan,
                                                 const std::function<absl::Status(const std::string&)>& try_one) {
  const std::vector<RootCandidate>& candidates = plan.candidates;
  RootLoadResult result;
  if (!plan.broken_latest.empty()) {
    result.fallbacks.push_back(absl::StrCat(plan.broken_latest,
                                            candidates.empty() ? std::string("; no committed step to fall back to")
                                                               : absl::StrCat("; falling back to the newest committed step, ",
                                                                              candidates[0].first)));
  }
  for (size_t i = 0; i < candidates.size(); ++i) {
    const std::string dir = JoinPath(root, candidates[i].second);
    const absl::Status loaded = try_one(dir);
    if (loaded.ok()) {
      result.step = candidates[i].first;
      result.dir = dir;
      return result;
    }
    if (absl::IsUnavailable(loaded) || absl::IsDeadlineExceeded(loaded)) return loaded;
    std::string line = absl::StrCat("step ", candidates[i].first, " ('", dir, "') failed verification: ", loaded.message());
    absl::StrAppend(&line, i + 1 < candidates.size() ? absl::StrCat("; falling back to step ", candidates[i + 1].first)
                                                     : std::string("; no older checkpoint"));
    result.fallbacks.push_back(std::move(line));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no checkpoint in root '", root, "' loads: ", absl::StrJoin(result.fallbacks, "\n")));
}

std::string RootLoadResult::Message() const {
  std::vector<std::string> lines = fallbacks;
  lines.push_back(absl::StrCat("loaded step ", step, " from '", dir, "'"));
  return absl::StrJoin(lines, "\n");
}

absl::StatusOr<RootLoadResult> ResolveCheckpointRoot(const std::string& root, Storage* storage,
                                                     const std::function<absl::Status(const std::string&)>& check) {
  SL_ASSIGN_OR_RETURN(const RootLoadPlan plan, RootLoadCandidates(root, StorageOrDefault(storage)));
  return TryRootCandidates(root, plan, check);
}

}  // namespace shardlight::sharded::checkpoint
