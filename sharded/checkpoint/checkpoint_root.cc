#include "sharded/checkpoint/checkpoint_root.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sharded/agreement.h"
#include "sharded/checkpoint/file_names.h"
#include "sharded/checkpoint/index.h"
#include "sharded/no_throw.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {
namespace {

constexpr char kStepPrefix[] = "step-";
constexpr char kLatestTempName[] = ".latest.tmp";  // never a step name, never named by an index
constexpr int64_t kMaxLatestBytes = 64;

// What an uncommitted step directory may hold and still be a leftover of a
// failed save or an interrupted deletion (so retention may remove it).
bool IsSaveOutput(absl::string_view name) { return name == kIndexFileName || IsCheckpointFileName(name); }

absl::Status Prefixed(const absl::Status& status, absl::string_view prefix) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

// Makes `latest` name `step`: temporary file, fsync, rename, fsync of the root.
absl::Status PublishLatest(Storage& storage, const std::string& root, int64_t step) {
  const std::string temp = JoinPath(root, kLatestTempName);
  // The root's entry for step-<N> must be durable before anything names it.
  SL_RETURN_IF_ERROR(storage.SyncDirectory(root));
  SL_RETURN_IF_ERROR(storage.Remove(temp));  // a leftover of an earlier crash
  const std::string text = StepDirName(step) + "\n";
  SL_ASSIGN_OR_RETURN(File file, File::CreateNew(storage, temp));
  SL_RETURN_IF_ERROR(file.WriteAt(text.data(), static_cast<int64_t>(text.size()), 0));
  SL_RETURN_IF_ERROR(file.Sync());
  SL_RETURN_IF_ERROR(file.Close());
  SL_RETURN_IF_ERROR(storage.Rename(temp, JoinPath(root, kLatestFileName)));
  return storage.SyncDirectory(root);
}

// Deletes one step directory: the index first (made durable), so a crash
// part-way leaves an uncommitted leftover, never a checkpoint missing files.
absl::Status DeleteStep(Storage& storage, const std::string& dir, const std::vector<std::string>& names) {
  if (std::find(names.begin(), names.end(), kIndexFileName) != names.end()) {
    SL_RETURN_IF_ERROR(storage.Remove(JoinPath(dir, kIndexFileName)));
    SL_RETURN_IF_ERROR(storage.SyncDirectory(dir));
  }
  for (const std::string& name : names) {
    if (name != kIndexFileName) SL_RETURN_IF_ERROR(storage.Remove(JoinPath(dir, name)));
  }
  return storage.Remove(dir);
}

// Retention after step `saved` was published: every step directory to
// delete is checked before the first deletion, so bad input deletes nothing.
// Each deletion is told to `on_removed` with its reason.
absl::Status ApplyRetention(Storage& storage, const std::string& root, int64_t saved, int keep_last,
                            const RemovalLog& on_removed) {
  SL_ASSIGN_OR_RETURN(const RootListing listing, ScanCheckpointRoot(root, storage));
  struct Victim {
    std::string dir;
    std::vector<std::string> names;
    std::string why;
  };
  std::vector<Victim> victims;
  int kept = 0;
  for (auto it = listing.steps.rbegin(); it != listing.steps.rend(); ++it) {
    if (it->step >= saved) {
      if (it->step == saved) ++kept;
      continue;
    }
    const bool leftover = !it->committed;
    if (!leftover && (keep_last == 0 || kept < keep_last)) {
      ++kept;
      continue;
    }
    const std::string dir = JoinPath(root, it->name);
    SL_ASSIGN_OR_RETURN(std::vector<std::string> names, storage.List(dir));
    for (const std::string& name : names) {
      if (!IsSaveOutput(name)) {
        return absl::FailedPreconditionError(absl::StrCat("retention would delete '", dir, "', but it holds '", name,
                                                          "', which a checkpoint save does not write; nothing deleted"));
      }
    }
    victims.push_back({dir, std::move(names),
                       leftover ? absl::StrCat("step ", it->step, " has no index (a save that never committed, or an "
                                               "interrupted deletion); its directory is gone too")
                                : absl::StrCat("retention keeps the newest ", keep_last,
                                               keep_last == 1 ? " checkpoint" : " checkpoints",
                                               "; the step directory is gone too")});
  }
  for (const Victim& v : victims) {
    SL_RETURN_IF_ERROR(DeleteStep(storage, v.dir, v.names));
    if (on_removed) on_removed(RemovalLine(static_cast<int>(v.names.size()), v.dir, v.why));
  }
  return victims.empty() ? absl::OkStatus() : storage.SyncDirectory(root);
}

// A step a load may try: its number and its directory's name.
using Candidate = std::pair<int64_t, std::string>;

// What a load tries, in order (RootListing::LoadCandidates), or the root's
// bad-input error; NotFound when it has no `latest`.
absl::StatusOr<std::vector<Candidate>> Candidates(const std::string& root, Storage& storage) {
  SL_ASSIGN_OR_RETURN(const RootListing listing, ScanCheckpointRoot(root, storage));
  if (!listing.latest.has_value()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint in '", root, "': it has no '", kLatestFileName, "' pointer"));
  }
  std::vector<Candidate> out;
  for (const RootStep& s : listing.LoadCandidates()) out.emplace_back(s.step, s.name);
  return out;
}

// `try_one` on each candidate's directory until one returns OK; each failure
// is a fallback line. Unavailable or DeadlineExceeded (a peer is gone) end
// the attempt at once.
absl::StatusOr<RootLoadResult> TryInOrder(const std::string& root, const std::vector<Candidate>& candidates,
                                          const std::function<absl::Status(const std::string&)>& try_one) {
  RootLoadResult result;
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

}  // namespace

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
  const absl::StatusOr<std::string> text = ReadWholeFile(storage, latest_path, kMaxLatestBytes);
  if (!text.ok()) return Prefixed(text.status(), absl::StrCat("broken 'latest' pointer '", latest_path, "': "));
  const std::string name(absl::StripTrailingAsciiWhitespace(*text));
  const std::optional<int64_t> step = ParseStepDirName(name);
  if (!step.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("broken 'latest' pointer '", latest_path, "': \"", absl::CHexEscape(name),
                                                   "\" is not a step directory name (step-<digits>)"));
  }
  const auto it = claimed.find(*step);
  if (it == claimed.end() || it->second != name) {
    return absl::FailedPreconditionError(absl::StrCat("broken 'latest' pointer '", latest_path, "': it names '", name,
                                                      "', which is not in the root"));
  }
  listing.latest = *step;
  return listing;
}

bool IsCheckpointRoot(const std::string& root, Storage* storage) {
  return StorageOrPosix(storage).Exists(JoinPath(root, kLatestFileName));
}

absl::Status SaveToCheckpointRoot(const StateDict& state_dict, const std::string& root, int64_t step,
                                  c10d::ProcessGroup& pg, const RootSaveOptions& options) {
  return SaveToCheckpointRootWith(root, step, pg, options, [&](const std::string& dir) {
    return SaveCheckpoint(state_dict, dir, pg, options.save);
  });
}

absl::Status SaveToCheckpointRootWith(const std::string& root, int64_t step, c10d::ProcessGroup& pg,
                                      const RootSaveOptions& options,
                                      const std::function<absl::Status(const std::string&)>& save_one) {
  const std::string what = absl::StrCat("checkpoint save of step ", step, " to root '", root, "'");
  Storage& storage = StorageOrPosix(options.save.storage.get());
  absl::Status mine;
  if (step < 0) {
    mine = absl::InvalidArgumentError(absl::StrCat("step ", step, " is negative"));
  } else if (options.keep_last < 0) {
    mine = absl::InvalidArgumentError(absl::StrCat("keep_last is ", options.keep_last, "; want >= 0"));
  } else if (pg.getRank() == 0) {
    mine = NoThrow([&] { return ScanCheckpointRoot(root, storage).status(); });
  }
  // Step 1: the root is sound and every rank saves the same step.
  SL_RETURN_IF_ERROR(AgreeOn(pg, mine.ok() ? absl::StatusOr<uint64_t>(static_cast<uint64_t>(step) + 1) : mine,
                             {what, "step"}));
  // Step 2: the checkpoint itself, committed atomically in its directory.
  SL_RETURN_IF_ERROR(save_one(JoinPath(root, StepDirName(step))));
  // Step 3: rank 0 moves `latest` once the new step is durable.
  absl::Status published;
  if (pg.getRank() == 0) {
    published = Prefixed(NoThrow([&] { return PublishLatest(storage, root, step); }),
                         absl::StrCat("step ", step, " is committed but 'latest' was not moved to it: "));
  }
  SL_RETURN_IF_ERROR(Agree(pg, published, what));
  // Step 4: retention, on rank 0, never touching what `latest` names.
  absl::Status retained;
  if (pg.getRank() == 0) {
    retained = Prefixed(NoThrow([&] { return ApplyRetention(storage, root, step, options.keep_last, options.save.on_removed); }),
                        absl::StrCat("step ", step, " is saved and 'latest' names it, but retention failed: "));
  }
  return Agree(pg, retained, what);
}

std::string RootLoadResult::Message() const {
  std::vector<std::string> lines = fallbacks;
  lines.push_back(absl::StrCat("loaded step ", step, " from '", dir, "'"));
  return absl::StrJoin(lines, "\n");
}

absl::StatusOr<RootLoadResult> LoadFromCheckpointRoot(const std::string& root, c10d::ProcessGroup& pg,
                                                      Storage* storage,
                                                      const std::function<absl::Status(const std::string&)>& load_one) {
  const std::string what = absl::StrCat("checkpoint load from root '", root, "'");
  // Step 1: rank 0's scan decides the candidates for every rank.
  std::string plan;
  absl::Status mine;
  if (pg.getRank() == 0) {
    mine = NoThrow([&]() -> absl::Status {
      SL_ASSIGN_OR_RETURN(const std::vector<Candidate> candidates, Candidates(root, StorageOrPosix(storage)));
      for (const Candidate& c : candidates) absl::StrAppend(&plan, c.first, " ", c.second, "\n");
      return absl::OkStatus();
    });
  }
  SL_ASSIGN_OR_RETURN(const std::vector<std::string> plans, AgreeAndGather(pg, {mine, 0, plan}, {what}));
  std::vector<Candidate> candidates;
  for (absl::string_view line : absl::StrSplit(plans[0], '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> parts = absl::StrSplit(line, ' ');
    int64_t step = 0;
    if (!absl::SimpleAtoi(parts.first, &step)) return absl::InternalError(absl::StrCat(what, ": bad plan line ", line));
    candidates.emplace_back(step, parts.second);
  }
  // Step 2: newest first; each failure is reported and the next one tried.
  return TryInOrder(root, candidates, load_one);
}

absl::StatusOr<RootLoadResult> ResolveCheckpointRoot(const std::string& root, Storage* storage,
                                                     const std::function<absl::Status(const std::string&)>& check) {
  SL_ASSIGN_OR_RETURN(const std::vector<Candidate> candidates, Candidates(root, StorageOrPosix(storage)));
  return TryInOrder(root, candidates, check);
}

absl::StatusOr<RootLoadResult> LoadCheckpointFromRoot(StateDict& to_fill, const std::string& root,
                                                      c10d::ProcessGroup& pg, const LoadOptions& options) {
  LoadOptions verified = options;
  verified.verify_before_write = true;  // a failed step changes nothing before the next is tried
  return LoadFromCheckpointRoot(root, pg, options.storage.get(),
                                [&](const std::string& dir) { return LoadCheckpoint(to_fill, dir, pg, verified); });
}

}  // namespace shardlight::sharded::checkpoint
