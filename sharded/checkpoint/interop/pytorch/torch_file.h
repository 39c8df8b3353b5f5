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
// With carry_values (what `ckpt import` asks for), every top-level entry of
// a Lightning checkpoint is selected, and inside the selected entries a
// subtree without tensors or class instances is one plain value at its
// dotted key (sharded/plain_value.h: "loops", "optimizer_states.0.param_groups"),
// tensors are selected as below, and what cannot be carried (a class
// instance, a storage, a dict key that is no str or int beside tensors, a key
// the checkpoint format refuses, a value too large for an index) is listed in
// not_carried by path; `structure` then records the containers that hold
// tensors (kStructureKey below), so that an export rebuilds the nesting.
// Without carry_values, inside the selected entries, nested dicts, lists and tuples flatten to
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
#include "sharded/plain_value.h"

namespace shardlight::sharded::checkpoint::pytorch {

// The value key under which an import records the nesting of the file's
// containers that hold tensors: {'version': 1, 'lightning': bool, 'prefix':
// str, 'tree': T}. T mirrors the root dict: a dict, list or tuple that holds
// tensors (or something not carried) is a dict (its original str or int
// keys), list or tuple of the same; None is an entry stored at its dotted
// path (prefix + path; in a Lightning file only state_dict's entries take
// the prefix, at paths from state_dict itself); False an entry that was not
// carried (a dict leaves it out, a list keeps its place with None). Not
// recorded for a file that is a flat dict with str keys (the plain export
// writes that back as it was).
inline constexpr char kStructureKey[] = "torch_save.structure";

struct SelectOptions {
  bool optimizer_states = false;  // Lightning: also "optimizer_states" (carry_values: everything is)
  bool global_step = false;       // Lightning: also "global_step" (an int)
  bool carry_values = false;      // see the top of this file
  // Prepended to the selected keys (Lightning with carry_values: to
  // state_dict's only).
  std::string key_prefix;
  // carry_values: the most the values' reprs may hold together; a value
  // that would pass it is not carried.
  int64_t max_values_bytes = (int64_t{1} << 20) - (int64_t{64} << 10);
};

struct SelectedTensor {
  std::string key;  // dotted, with key_prefix
  int node = -1;    // a kTensor node of the graph
  size_t prefix_bytes = 0;  // how much of key is key_prefix (the rest is the path in the file)
};

struct SelectedValue {
  std::string key;  // dotted, with key_prefix
  PlainValue value;
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
  // carry_values: the plain values (file order), what was not carried
  // ("hparams.opt: argparse.Namespace"; the first 32, not_carried_count counts
  // all), and the structure record (kStructureKey; none for a flat dict).
  std::vector<SelectedValue> values;
  std::vector<std::string> not_carried;
  int64_t not_carried_count = 0;
  std::optional<PlainValue> structure;
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
