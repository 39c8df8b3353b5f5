// What a Trainer run is, for its checkpoints: the record (run_record.h) the
// Trainer writes into every checkpoint's index -- "structure" (a StableHash of
// the module's state-dict names, dtypes and global shapes, so not of the world
// size), "seed", and the run's own TrainerOptions::run_options -- and the
// comparison a resume makes against a checkpoint's record.
#ifndef SHARDLIGHT_LIGHTNING_RUN_FINGERPRINT_H_
#define SHARDLIGHT_LIGHTNING_RUN_FINGERPRINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lightning/lightning_module.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/format/run_record.h"

namespace shardlight::lightning {

struct RunFingerprint {
  sharded::checkpoint::RunRecord record;
  // The state dict as the fingerprint saw it, in its order: key -> "Float[40, 8]".
  std::vector<std::pair<std::string, std::string>> structure;
};

// Local. InvalidArgument when run_options would make an invalid record (a bad
// name or value, or one of the reserved names "structure" and "seed").
absl::StatusOr<RunFingerprint> FingerprintRun(LightningModule& module, uint64_t seed,
                                              const std::map<std::string, std::string>& run_options);

// How the checkpoint whose index is `index` differs from `run`, for a
// message: "" when the records are equal or the index has none (a checkpoint
// from before records, or a `ckpt import`). A structure difference names the
// first model key that differs (its entries are "model.<key>" in `index`).
std::string DescribeRunDifference(const sharded::checkpoint::CheckpointIndex& index, const RunFingerprint& run);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_RUN_FINGERPRINT_H_
