// A file written by Python's torch.save (zip container, PyTorch 1.6+), opened
// for reading without Python: the zip with our ZipReader (every declared size
// checked before anything is allocated or inflated), data.pkl with our
// restricted ReadPickle (never LibTorch's unpickler, which executes what it is
// given), and tensors are rebuilt from their storage records only after their
// sizes, strides and offset are checked against the storage, and the
// storage's size against the record's.
//
// Memory: the pickle's graph (see pickle_reader.h) plus the storages read so
// far; a record is read straight into its storage.
//
// SelectEntries decides what a file's pickle holds for an import:
// - a PyTorch Lightning checkpoint (a dict with "state_dict" and one of
//   "global_step", "epoch", "pytorch-lightning_version"): the "state_dict"
//   entry, and when asked "optimizer_states" and "global_step"; every other
//   top-level entry is skipped, recorded by name and the classes it holds,
//   never built;
// - anything else: the whole top-level dict.
// Inside the selected entries, nested dicts, lists and tuples flatten to
// dotted keys ("layers.0.weight"); tensors are imported; None, bool, int,
// float and str are allowed but not stored (a checkpoint holds tensors);
// anything else (a class instance, bytes, a set) is InvalidArgument naming
// its type and key path. A key path longer than 1024 bytes, or a graph that
// shares records to multiply its paths beyond twice its edges, is refused.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_TORCH_FILE_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_TORCH_FILE_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sharded/checkpoint/interop/pytorch/pickle_reader.h"
#include "sharded/checkpoint/interop/pytorch/zip_reader.h"

namespace shardlight::sharded::checkpoint::pytorch {

struct SelectOptions {
  bool optimizer_states = false;  // Lightning: also "optimizer_states"
  bool global_step = false;       // Lightning: also "global_step" (an int)
};

struct SelectedTensor {
  std::string key;  // dotted
  int node = -1;    // a kTensor node of the graph
};

struct Selection {
  bool lightning = false;
  std::vector<SelectedTensor> tensors;  // in pickle order
  std::optional<int64_t> global_step;
  // "hyper_parameters: pytorch_lightning.utilities.parsing.AttributeDict"
  // (the first 32 entries, at most 32 classes each; skipped_count counts all)
  std::vector<std::string> skipped;
  int64_t skipped_count = 0;
  // "epoch_stats.count: int" -- allowed non-tensor values, not stored (the
  // first 32; not_stored_count counts all).
  std::vector<std::string> not_stored;
  int64_t not_stored_count = 0;
};

// Pure function of the graph: also what fuzzing and unit tests drive.
absl::StatusOr<Selection> SelectEntries(const PickleGraph& graph, const SelectOptions& options);

class TorchFile {
 public:
  // Opens `path`, checks the container and reads data.pkl. InvalidArgument
  // for a truncated or corrupt zip, a legacy (pre-1.6) torch.save file, a
  // big-endian file or a bad pickle, each naming the file.
  static absl::StatusOr<std::unique_ptr<TorchFile>> Open(const std::string& path);
  // The same on any Storage (a DCP item, a fuzz input in memory);
  // check_crc = false only for fuzzing (see ZipReader::Open).
  static absl::StatusOr<std::unique_ptr<TorchFile>> Open(Storage& storage, const std::string& path,
                                                         bool check_crc = true);
  ~TorchFile();

  const PickleGraph& graph() const { return graph_; }
  const std::string& path() const { return path_; }

  // The tensor of kTensor node `node`, sharing its storage record's memory
  // (read once per storage). `key` names it in errors. InvalidArgument for a
  // missing storage record, a record whose declared size disagrees with its
  // storage (checked before anything is allocated), a record that inflates
  // to another size or fails its CRC, or sizes/strides/offset that overrun
  // the storage; ResourceExhausted when the storage cannot be allocated.
  absl::StatusOr<at::Tensor> Tensor(int node, const std::string& key);

 private:
  TorchFile() = default;
  std::string path_;
  std::unique_ptr<ZipReader> zip_;
  PickleGraph graph_;
  std::map<std::string, at::Storage> storages_;  // by storage key
};

}  // namespace shardlight::sharded::checkpoint::pytorch

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_TORCH_FILE_H_
