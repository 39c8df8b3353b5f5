// Import of a torch.save file (a state dict, or a PyTorch Lightning .ckpt)
// into a shardlight checkpoint written for a chosen world size, with chosen
// tensors sharded (chunked along a dim over every rank) and the rest dense.
//
// The whole input is read and checked (see torch_file.h) before anything is
// written: bad input leaves OUT_DIR as it was. When OUT_DIR does not exist
// the checkpoint is written into a sibling temporary directory that is
// renamed into place once committed; when it exists, the offline writer's
// atomic commit replaces the checkpoint in it (or leaves it untouched).
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_TORCH_IMPORT_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_TORCH_IMPORT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sharded/checkpoint/offline/offline_writer.h"

namespace shardlight::sharded::checkpoint::pytorch {

struct ImportOptions {
  int world_size = 1;
  // Imported key (before key_prefix) -> the dim it is chunked along. A key
  // that is not imported is an error (a typo would otherwise go unnoticed).
  std::map<std::string, int64_t> shard_dims;
  // Prepended to every imported key ("model." matches the Trainer's layout).
  std::string key_prefix;
  // Lightning files: also import "optimizer_states" (as optimizer_states.*)
  // and "global_step" (an I64 tensor of shape [1] at global_step_key, the
  // Trainer's step layout when that is "trainer.step").
  bool optimizer_states = false;
  bool global_step = false;
  std::string global_step_key = "global_step";
  OfflineWriterOptions writer;
};

struct ImportReport {
  bool lightning = false;
  int64_t tensors = 0;
  int64_t sharded = 0;
  int64_t data_bytes = 0;  // tensor bytes imported
  std::optional<int64_t> global_step;
  std::vector<std::string> skipped;     // top-level entries not imported, with their classes (the first 32)
  int64_t skipped_count = 0;            // all of them
  std::vector<std::string> not_stored;  // non-tensor values inside imported entries (the first 32)
  int64_t not_stored_count = 0;         // all of them
};

absl::StatusOr<ImportReport> ImportTorchFile(const std::string& in_path, const std::string& out_dir,
                                             const ImportOptions& options);

// "key=dim" items (the --shard flag) and layout files (one "key=dim" per
// line, '#' comments, blank lines ignored) into ImportOptions::shard_dims.
absl::Status ParseShardSpecs(const std::vector<std::string>& specs, std::map<std::string, int64_t>* dims);
absl::Status ReadShardLayoutFile(const std::string& path, std::map<std::string, int64_t>* dims);

}  // namespace shardlight::sharded::checkpoint::pytorch

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_TORCH_IMPORT_H_
