#include "sharded/checkpoint/roots/checkpoint_root.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sharded/agreement.h"
#include "sharded/checkpoint/format/file_names.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "sharded/no_throw.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {
namespace {

constexpr char kLatestTempName[] = ".latest.tmp";  // never a step name, never named by an index

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
absl::Status ApplyRetention(Storage& storage, const std::string& root, int64_t saved, const RootSaveOptions& options) {
  const int keep_last = options.keep_last;
  const RemovalLog& on_removed = options.save.on_removed;
  const auto chosen = [&](int64_t step) {
    return std::find(options.keep_steps->begin(), options.keep_steps->end(), step) != options.keep_steps->end();
  };
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
    const bool keep = options.keep_steps.has_value() ? chosen(it->step) : (keep_last == 0 || kept < keep_last);
    if (!leftover && keep) {
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
                                : options.keep_steps.has_value()
                                ? absl::StrCat(options.keep_why, "; the step directory is gone too")
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

absl::Status Prefixed(const absl::Status& status, absl::string_view prefix) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

}  // namespace

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
  Storage& storage = StorageOrDefault(options.save.storage.get());
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
    retained = Prefixed(NoThrow([&] { return ApplyRetention(storage, root, step, options); }),
                        absl::StrCat("step ", step, " is saved and 'latest' names it, but retention failed: "));
  }
  return Agree(pg, retained, what);
}

absl::StatusOr<RootLoadResult> LoadFromCheckpointRoot(const std::string& root, c10d::ProcessGroup& pg,
                                                      Storage* storage,
                                                      const std::function<absl::Status(const std::string&)>& load_one) {
  const std::string what = absl::StrCat("checkpoint load from root '", root, "'");
  // Step 1: rank 0's scan decides the plan for every rank. On the wire: the
  // broken-`latest` line (often empty; ScanCheckpointRoot keeps it one
  // line), then one "<step> <name>" line per candidate.
  std::string wire;
  absl::Status mine;
  if (pg.getRank() == 0) {
    mine = NoThrow([&]() -> absl::Status {
      SL_ASSIGN_OR_RETURN(const RootLoadPlan plan, RootLoadCandidates(root, StorageOrDefault(storage)));
      wire = plan.broken_latest + "\n";
      for (const RootCandidate& c : plan.candidates) absl::StrAppend(&wire, c.first, " ", c.second, "\n");
      return absl::OkStatus();
    });
  }
  SL_ASSIGN_OR_RETURN(const std::vector<std::string> wires, AgreeAndGather(pg, {mine, 0, wire}, {what}));
  const std::vector<std::string> lines = absl::StrSplit(wires[0], '\n');
  RootLoadPlan plan;
  plan.broken_latest = lines[0];
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    std::pair<std::string, std::string> parts = absl::StrSplit(lines[i], ' ');
    int64_t step = 0;
    if (!absl::SimpleAtoi(parts.first, &step)) return absl::InternalError(absl::StrCat(what, ": bad plan line ", lines[i]));
    plan.candidates.emplace_back(step, parts.second);
  }
  // Step 2: newest first; each failure is reported and the next one tried.
  return TryRootCandidates(root, plan, load_one);
}

absl::StatusOr<RootLoadResult> LoadCheckpointFromRoot(StateDict& to_fill, const std::string& root,
                                                      c10d::ProcessGroup& pg, const LoadOptions& options) {
  LoadOptions verified = options;
  verified.verify_before_write = true;  // a failed step changes nothing before the next is tried
  return LoadFromCheckpointRoot(root, pg, options.storage.get(),
                                [&](const std::string& dir) { return LoadCheckpoint(to_fill, dir, pg, verified); });
}

}  // namespace shardlight::sharded::checkpoint
