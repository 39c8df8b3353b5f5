// Test support for checkpoint roots: a layout with uneven and empty shards,
// per-step reference values, and one rank's save and checked load of a step.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_ROOTS_CHECKPOINT_ROOT_TESTING_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_ROOTS_CHECKPOINT_ROOT_TESTING_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sharded/checkpoint/roots/checkpoint_root.h"
#include "sharded/checkpoint/checkpoint_testing.h"

namespace shardlight::sharded::checkpoint::testing {

// Rows 3 over 4 ranks leave one shard empty; 7 over 3 is uneven.
std::vector<TensorSpec> RootLayout(int world);

// The salt of step s's values.
int StepSalt(int64_t step);

// This rank's part of SaveToCheckpointRoot of step `step` (values of StepSalt).
// `on_removed` is SaveOptions::on_removed.
absl::Status SaveStepHere(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, const std::string& root, int64_t step,
                          int keep_last, std::shared_ptr<Storage> storage = nullptr, RemovalLog on_removed = nullptr);

// This rank's part of LoadCheckpointFromRoot; the values loaded must be the
// reported step's, and a failed load must leave the destination untouched
// (Internal otherwise).
absl::StatusOr<RootLoadResult> LoadRootHere(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, const std::string& root,
                                            std::shared_ptr<Storage> storage = nullptr);

}  // namespace shardlight::sharded::checkpoint::testing

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_ROOTS_CHECKPOINT_ROOT_TESTING_H_
