// The local half of a checkpoint root (checkpoint_root.h tells the whole
// story): its names, the scan of its entries, the order a load tries its
// steps in, and that resolution run by one process. No process group and no
// collective code: the ckpt tool resolves roots with this alone.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_ROOTS_ROOT_LAYOUT_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_ROOTS_ROOT_LAYOUT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sharded/checkpoint/storage/storage.h"

namespace shardlight::sharded::checkpoint {

inline constexpr char kLatestFileName[] = "latest";

// "step-000100": at least six digits, more for larger steps. `step` >= 0.
std::string StepDirName(int64_t step);
// The step a name of the form "step-<digits>" claims; nullopt otherwise.
std::optional<int64_t> ParseStepDirName(absl::string_view name);

struct RootStep {
  int64_t step = 0;
  std::string name;        // the directory's name in the root
  bool committed = false;  // its index.json is in place
};

struct RootListing {
  std::optional<int64_t> latest;  // nullopt: no usable `latest` pointer
  // Why `latest` is there but unusable (unreadable, not "step-<digits>",
  // naming a step not in the root); empty when it is fine or absent. A
  // broken pointer is like a broken step directory: loads fall back to the
  // newest committed step, and the next save replaces it.
  std::string broken_latest;
  std::vector<RootStep> steps;  // every step entry, ascending
  // What a load tries, in order: the latest step, then the committed steps
  // below it, newest first; with a broken `latest`, every committed step,
  // newest first.
  std::vector<RootStep> LoadCandidates() const;
};

// Local (no communication): the root's entries, or the bad-input error that
// names what is wrong. A missing root is an empty listing.
absl::StatusOr<RootListing> ScanCheckpointRoot(const std::string& root, Storage& storage);

// Whether `root` has a `latest` pointer. Local; a null storage is POSIX.
bool IsCheckpointRoot(const std::string& root, Storage* storage = nullptr);

// What an uncommitted step directory may hold and still be a leftover of a
// failed save or an interrupted deletion (retention may remove it): the
// index and the data files a save writes.
bool IsSaveOutput(absl::string_view name);

// A step a load may try: its number and its directory's name.
using RootCandidate = std::pair<int64_t, std::string>;

// What a load tries: the candidates in order (RootListing::LoadCandidates)
// and, when `latest` is broken, why (RootListing::broken_latest).
struct RootLoadPlan {
  std::vector<RootCandidate> candidates;
  std::string broken_latest;
};

// What a load tries, or the root's bad-input error; NotFound when it has no
// `latest` at all. Local.
absl::StatusOr<RootLoadPlan> RootLoadCandidates(const std::string& root, Storage& storage);

struct RootLoadResult {
  int64_t step = -1;
  std::string dir;                     // the step directory loaded
  std::vector<std::string> fallbacks;  // one line per newer step that failed
  // "loaded step 100 from '<dir>'", preceded by the fallback lines.
  std::string Message() const;
};

// `try_one` on each candidate's directory until one returns OK; a broken
// `latest` is the first fallback line, each failure adds one more.
// Unavailable or DeadlineExceeded (a peer is gone) end the attempt at once
// and are returned as they are; when every candidate fails (or there is
// none), FailedPrecondition listing each failure. Collective exactly when
// `try_one` is.
absl::StatusOr<RootLoadResult> TryRootCandidates(const std::string& root, const RootLoadPlan& plan,
                                                 const std::function<absl::Status(const std::string&)>& try_one);

// Local (no communication): the same resolution for one process, e.g. the
// ckpt tool given a root: `check(step_dir)` on the candidates in the order a
// load tries them until one returns OK; the result names that step and
// carries the fallback lines a load would print. Errors as
// LoadFromCheckpointRoot's (NotFound without `latest`, the bad input above,
// FailedPrecondition listing every failure).
absl::StatusOr<RootLoadResult> ResolveCheckpointRoot(const std::string& root, Storage* storage,
                                                     const std::function<absl::Status(const std::string&)>& check);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_ROOTS_ROOT_LAYOUT_H_
