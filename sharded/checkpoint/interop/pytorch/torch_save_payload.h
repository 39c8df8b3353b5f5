// A torch.save archive (PyTorch >= 1.6 zip format) stored in a byte range of
// a file: a whole .pt file, or one item of a PyTorch DCP .distcp file (each
// is a run of torch.save payloads). Opened without Python and without
// reading any storage record: the zip's central directory and the local
// headers give every record's byte range, data.pkl is read by the restricted
// ReadPickle, and a record's bytes are read by whoever needs them, in the
// pieces they need (a rank reads only the part of a record its shards
// overlap).
//
// Only stored (uncompressed) records are accepted: torch.save never
// compresses, and a compressed record (a zip bomb's way in) is refused
// naming it, before anything is inflated or allocated for it. Every size the
// zip declares is checked against the byte range before it is used.
//
// Errors (InvalidArgument unless said otherwise) start with `display` (the
// file and, for a DCP item, the key): a range past the end of the file
// (DataLoss: truncated), no end-of-central-directory record, a directory or
// a record outside the range, overlapping records, an encrypted or
// compressed record, records under more than one top-level folder, a missing
// data.pkl, a big-endian archive, a bad pickle.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_TORCH_SAVE_PAYLOAD_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_TORCH_SAVE_PAYLOAD_H_

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sharded/checkpoint/interop/pytorch/pickle_reader.h"
#include "sharded/checkpoint/storage/storage.h"

namespace shardlight::sharded::checkpoint::pytorch {

// A stored record: its bytes are [begin, begin + size) of the file.
struct PayloadRecord {
  int64_t begin = 0;
  int64_t size = 0;
};

// A tensor of a payload whose data is one row-major run of its storage
// record: the file's bytes [begin, end) hold it.
struct PayloadTensor {
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> sizes;
  int64_t begin = 0;
  int64_t end = 0;
};

// An archive larger than this in records or in data.pkl is refused.
constexpr int64_t kMaxPayloadRecords = 1 << 20;

class TorchSavePayload {
 public:
  // Reads the directory and data.pkl of the archive at [begin, begin +
  // length) of `file`. `objects` as ReadPickle's.
  static absl::StatusOr<TorchSavePayload> Open(const File& file, int64_t begin, int64_t length,
                                               const std::string& display,
                                               ObjectState objects = ObjectState::kDiscard);

  const PickleGraph& graph() const { return graph_; }
  // Record "<folder>/<name>" (e.g. "data/0"); NotFound when absent.
  absl::StatusOr<PayloadRecord> Record(const std::string& name) const;
  // Tensor node `node` of the graph located in the file: its storage record
  // must hold the storage's numel elements, and the tensor must be a
  // row-major run inside it (any other layout is Unimplemented, naming its
  // strides). `what` names it in errors.
  absl::StatusOr<PayloadTensor> Tensor(int node, const std::string& what) const;

 private:
  std::string display_;
  std::string folder_;  // "archive"
  std::map<std::string, PayloadRecord> records_;  // by name inside the folder
  PickleGraph graph_;
};

}  // namespace shardlight::sharded::checkpoint::pytorch

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_TORCH_SAVE_PAYLOAD_H_
