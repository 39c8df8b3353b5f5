#include "sharded/checkpoint/roots/checkpoint_root_testing.h"

#include <utility>

#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint::testing {

std::vector<TensorSpec> RootLayout(int world) {
  return {{"w", {3, 4}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(0, world)},
          {"v", {7, 2}, c10::ScalarType::Long, ChunkShardingSpec::OnRanks(1, world)},
          {"b", {5}, c10::ScalarType::Float, std::nullopt}};
}

int StepSalt(int64_t step) { return static_cast<int>(step) + 10; }

absl::Status SaveStepHere(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, const std::string& root, int64_t step,
                          int keep_last, std::shared_ptr<Storage> storage, RemovalLog on_removed) {
  RootSaveOptions options;
  options.keep_last = keep_last;
  options.save.storage = std::move(storage);
  options.save.on_removed = std::move(on_removed);
  SL_ASSIGN_OR_RETURN(StateDict state, MakeState(RootLayout(pg->getSize()), StepSalt(step), pg));
  return SaveToCheckpointRoot(state, root, step, *pg, options);
}

absl::StatusOr<RootLoadResult> LoadRootHere(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, const std::string& root,
                                            std::shared_ptr<Storage> storage) {
  LoadOptions options;
  options.storage = std::move(storage);
  SL_ASSIGN_OR_RETURN(StateDict state, MakeState(RootLayout(pg->getSize()), -1, pg));
  absl::StatusOr<RootLoadResult> loaded = LoadCheckpointFromRoot(state, root, *pg, options);
  if (!loaded.ok()) {
    if (!AllSentinel(state)) return absl::InternalError("a failed load changed the destination");
    return loaded;
  }
  SL_RETURN_IF_ERROR(CheckState(state, StepSalt(loaded->step)));
  return loaded;
}

}  // namespace shardlight::sharded::checkpoint::testing
