// A checkpoint root: several step-numbered checkpoints kept side by side, a
// `latest` pointer to the newest durable one, retention of the last few, and
// a load that falls back to an older checkpoint when the newest fails.
//
//   root/latest         "step-000200\n": the newest checkpoint known durable
//   root/step-000100/   a checkpoint directory as SaveCheckpoint writes it
//   root/step-000200/
//
// Save of step N (collective): rank 0 scans the root (bad input below fails
// every rank before anything is written); SaveCheckpoint into step-<N>/
// (its own atomic commit, see checkpoint.h); rank 0 fsyncs the root, writes
// `latest` under a temporary name, fsyncs it, renames it over `latest` and
// fsyncs the root again -- the pointer moves only once the checkpoint it
// names is durable. Then, with keep_last > 0, retention: the committed steps
// at or below N beyond the newest keep_last (or, with keep_steps, those not
// in it), and leftovers of failed saves or
// interrupted deletions (step directories without an index, below N) are
// deleted (each told to SaveOptions::on_removed with its reason), each one
// index first, so a crash mid-deletion leaves a leftover,
// never a half-deleted checkpoint that a load would pick. Retention never
// touches step N nor anything above it. A crash at any storage operation of
// this sequence leaves `latest` naming a durable, complete checkpoint (or, on
// the first save, no `latest` at all: an empty root).
//
// A save of step N points `latest` at N even when the root holds newer steps
// (a run resumed from an older checkpoint after a fallback): those are then
// ignored by loads and replaced when a save reaches their step.
//
// Load (collective): the checkpoint `latest` names first, then every older
// committed step, newest first; the first that loads wins. Each one that
// fails (missing index, corrupt or truncated file, checksum mismatch, ...)
// adds a line to RootLoadResult::fallbacks saying so and which step is tried
// next. A step whose index.json is there but cannot be read (a dangling
// link, a loop, a directory, a FIFO, ...) is such a failure, never an
// absent step. Loads verify before writing, so a failed attempt changes
// nothing.
//
// A broken `latest` (unreadable, not "step-<digits>", or naming a step with
// no directory) is like a broken step: a load says so in the first fallback
// line and tries every committed step, newest first; a save replaces it
// (one that is a directory cannot be replaced: that save fails naming it).
//
// Bad input, each an error naming it, with nothing deleted or written: two
// entries claiming the same step ("step-100" and "step-000100"); a step
// entry that is a file, or a step directory without an index that holds
// files a save does not write (not a checkpoint, not a leftover).
//
// A plain checkpoint directory (no `latest`) is still what SaveCheckpoint,
// LoadCheckpoint and the ckpt tool work on; a root is a directory of them.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_ROOTS_CHECKPOINT_ROOT_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_ROOTS_CHECKPOINT_ROOT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/roots/root_layout.h"
#include "sharded/checkpoint/storage/storage.h"

namespace shardlight::sharded::checkpoint {

struct RootSaveOptions {
  // > 0: after a save, keep only the newest keep_last committed steps (at or
  // below the one saved). 0: keep every checkpoint.
  int keep_last = 0;
  // For the step's SaveCheckpoint; its storage is the root's too.
  SaveOptions save;
  // Set: instead of the newest keep_last, retention keeps exactly these
  // committed steps below the one saved (the step saved is always kept, as
  // `latest` names it) -- how a ModelCheckpoint (lightning/
  // model_checkpoint.h) keeps its best k. `keep_why` says, in each removal
  // line, why the others go ("ModelCheckpoint keeps ..."). Every rank must
  // pass the same set (the caller agrees on it); only rank 0 deletes.
  std::optional<std::vector<int64_t>> keep_steps;
  std::string keep_why;
};

// Collective: saves `state_dict` as step `step` (>= 0, the same on every
// rank) of `root`, moves `latest` to it and applies retention. Errors are the
// same on every rank: bad input (above), ranks passing different steps,
// SaveCheckpoint's errors (nothing committed), "committed but `latest` not
// moved" when publishing fails, "saved, but retention failed" when a
// deletion fails (the new checkpoint is durable and `latest` names it).
absl::Status SaveToCheckpointRoot(const StateDict& state_dict, const std::string& root, int64_t step,
                                  c10d::ProcessGroup& pg, const RootSaveOptions& options = {});

// SaveToCheckpointRoot with the step's checkpoint written by
// `save_one(step_dir)`, which must be collective, return the same status on
// every rank and commit atomically (SaveCheckpoint's contract): how an async
// save (async_checkpointer.h) writes into a root.
absl::Status SaveToCheckpointRootWith(const std::string& root, int64_t step, c10d::ProcessGroup& pg,
                                      const RootSaveOptions& options,
                                      const std::function<absl::Status(const std::string&)>& save_one);

// Collective: tries `load_one(step_dir)` on the candidates in order until one
// returns OK. `load_one` must be collective and return the same status on
// every rank (LoadCheckpoint does); it must leave its destination unchanged
// when it fails. NotFound when the root has no `latest`; bad input as above;
// when every candidate fails, FailedPrecondition listing each failure. A
// failure that is Unavailable or DeadlineExceeded (a peer is gone) ends the
// load at once: another step would fail the same way.
absl::StatusOr<RootLoadResult> LoadFromCheckpointRoot(const std::string& root, c10d::ProcessGroup& pg,
                                                      Storage* storage,
                                                      const std::function<absl::Status(const std::string&)>& load_one);

// LoadCheckpoint of the newest good step of `root` into `to_fill`, with
// options.verify_before_write forced on.
absl::StatusOr<RootLoadResult> LoadCheckpointFromRoot(StateDict& to_fill, const std::string& root,
                                                      c10d::ProcessGroup& pg, const LoadOptions& options = {});

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_ROOTS_CHECKPOINT_ROOT_H_
