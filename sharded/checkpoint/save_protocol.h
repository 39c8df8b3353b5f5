// The save protocol of checkpoint.h in its two halves: planning (what this
// rank writes; local) and running (agreement, data file, rename, commit;
// collective). SaveCheckpoint is PlanSave then RunSave on the caller's
// thread; an asynchronous save (async_checkpointer.h) plans on the caller's
// thread and runs the same RunSave on its own thread and process group, with
// the entries' bytes coming from its staging area (`source`) instead of the
// tensors. One protocol, two callers.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_SAVE_PROTOCOL_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_SAVE_PROTOCOL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/format/data_file.h"
#include "sharded/state_dict.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::sharded::checkpoint {

// What this rank writes, and a fingerprint of the whole dict's structure that
// all ranks must share.
struct SavePlan {
  std::vector<EntryToWrite> entries;              // this rank's data file, in order
  std::vector<std::pair<std::string, int>> refs;  // (key, shard index or -1 for dense), per entry
  uint64_t fingerprint = 0;
};

// Local: checks this rank's part of `state_dict` (keys, dtypes, placements)
// for a save as `rank` of `world` ranks. InvalidArgument naming the key.
absl::StatusOr<SavePlan> PlanSave(const StateDict& state_dict, int rank, int world);

// The tensors PlanSave puts in its entries, in its order, whenever it
// succeeds: on rank 0 every dense tensor, on each rank its local shards in
// metadata order. What an asynchronous save stages before its writer plans
// (the writer checks that the plan names exactly these).
std::vector<at::Tensor> TensorsToWrite(const std::vector<StateDict::Entry>& entries, int rank);

// Collective: the protocol of checkpoint.h from a plan (a failed plan is this
// rank's error, agreed like any other). `state_dict` supplies only the
// structure the index records (keys, shapes, dtypes, shard boxes), never
// tensor bytes when `source` is set: then every entry's bytes are taken from
// `source`, in order (the entries' tensors give only dtype and shape).
absl::Status RunSave(const StateDict& state_dict, const absl::StatusOr<SavePlan>& plan, const std::string& dir,
                     c10d::ProcessGroup& pg, const SaveOptions& options, EntryByteSource* source, SaveStats* stats);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_SAVE_PROTOCOL_H_
