// Import of a torch.save file (a state dict, or a PyTorch Lightning .ckpt)
// into a shardlight checkpoint written for a chosen world size, with chosen
// tensors sharded (chunked along a dim over every rank) and the rest dense;
// every plain value carried as a value (its nesting recorded, so that
// ExportTorchFile writes the same nested structure back: torch_file.h), and
// what cannot be carried named in the report.
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
  // Prepended to every imported key ("model." matches the Trainer's
  // layout); in a Lightning file to state_dict's keys only.
  std::string key_prefix;
  // Everything is imported (torch_file.h, carry_values): a Lightning file's
  // optimizer_states as "optimizer_states.*", global_step, epoch, loops,
  // lr_schedulers, hyper_parameters ... as values. Kept for callers that
  // still set it; it changes nothing.
  bool optimizer_states = false;
  // Lightning files: also the global_step as an int value at
  // global_step_key (the Trainer's step when that is "trainer.step").
  bool global_step = false;
  std::string global_step_key = "global_step";
  OfflineWriterOptions writer;
};

struct ImportReport {
  bool lightning = false;
  int64_t tensors = 0;
  int64_t sharded = 0;
  int64_t data_bytes = 0;  // tensor bytes imported
  int64_t values = 0;      // plain values imported (the structure record not counted)
  std::optional<int64_t> global_step;
  // What was not carried, with why: "hparams.opt: argparse.Namespace" (the
  // first 32; not_carried_count counts all).
  std::vector<std::string> not_carried;
  int64_t not_carried_count = 0;
  // Whether the file's nesting was recorded (kStructureKey in torch_file.h);
  // when the file needed one and it was not, why.
  bool structure = false;
  std::string structure_note;
};

absl::StatusOr<ImportReport> ImportTorchFile(const std::string& in_path, const std::string& out_dir,
                                             const ImportOptions& options);

// "key=dim" items (the --shard flag) and layout files (one "key=dim" per
// line, '#' comments, blank lines ignored) into ImportOptions::shard_dims.
absl::Status ParseShardSpecs(const std::vector<std::string>& specs, std::map<std::string, int64_t>* dims);
absl::Status ReadShardLayoutFile(const std::string& path, std::map<std::string, int64_t>* dims);

}  // namespace shardlight::sharded::checkpoint::pytorch

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_TORCH_IMPORT_H_
