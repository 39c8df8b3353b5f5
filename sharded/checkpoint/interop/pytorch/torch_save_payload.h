// A torch.save archive (PyTorch >= 1.6 zip format) stored in a byte range of
// a file: one item of a PyTorch DCP .distcp file (a run of torch.save
// payloads). Opened without Python and without reading any storage record:
// the zip (zip_reader.h, every declared size checked) gives each record's
// byte range, data.pkl is read by the restricted ReadPickle, and a tensor's
// bytes are read by whoever needs them, in the pieces they need (a rank reads
// only the part of a record its shards overlap).
//
// A tensor's storage record must be stored (torch.save never compresses; a
// compressed one is refused naming it, nothing inflated).
//
// Errors (InvalidArgument unless said otherwise) start with `display` (the
// file and, for a DCP item, the key): a range past the end of the file
// (DataLoss: truncated), every ZipReader error, a missing data.pkl, a
// big-endian archive, a bad pickle.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_TORCH_SAVE_PAYLOAD_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_TORCH_SAVE_PAYLOAD_H_

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sharded/checkpoint/interop/pytorch/pickle_reader.h"
#include "sharded/checkpoint/interop/pytorch/zip_reader.h"
#include "sharded/checkpoint/storage/storage.h"

namespace shardlight::sharded::checkpoint::pytorch {

// A stored record: its bytes are [begin, begin + size) of the file.
struct PayloadRecord {
  int64_t begin = 0;
  int64_t size = 0;
};

// A tensor of a payload whose data is one dense run of its storage record:
// the file's bytes [begin, end) hold it, row-major, or row-major over its
// dims in `dim_order` (a transposed or channels_last tensor that DCP saved
// as it was, since it covers its storage).
struct PayloadTensor {
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> sizes;
  std::vector<int64_t> dim_order;  // empty: row-major; else as EntrySource::dim_order
  int64_t begin = 0;
  int64_t end = 0;
};

// A data.pkl larger than this is refused unread (a tensor's is ~200 bytes,
// a value's a few hundred).
constexpr int64_t kMaxPayloadPickleBytes = int64_t{64} << 20;

class TorchSavePayload {
 public:
  // Reads the directory and data.pkl of the archive at [begin, begin +
  // length) of `file`. `objects` as ReadPickle's.
  static absl::StatusOr<TorchSavePayload> Open(const File& file, int64_t begin, int64_t length,
                                               const std::string& display,
                                               ObjectState objects = ObjectState::kDiscard);

  const PickleGraph& graph() const { return graph_; }
  // Stored record "<folder>/<name>" (e.g. "data/0"); NotFound when absent.
  absl::StatusOr<PayloadRecord> Record(const std::string& name) const;
  // Tensor node `node` of the graph located in the file: its storage record
  // must hold the storage's numel elements, and the tensor must be a dense
  // run inside it: row-major, or row-major over permuted dims (dim_order).
  // Negative strides and expanded (zero-stride) views are InvalidArgument,
  // overlapping or gapped layouts Unimplemented, each naming the strides;
  // the check is O(dims log dims), whatever the strides. `what` names it.
  absl::StatusOr<PayloadTensor> Tensor(int node, const std::string& what) const;

 private:
  explicit TorchSavePayload(ZipReader zip) : zip_(std::move(zip)) {}
  // The dim order of a dense layout (empty when row-major or one element).
  absl::StatusOr<std::vector<int64_t>> DenseDimOrder(const PickleTensor& t, int64_t numel,
                                                     const std::string& what) const;
  std::string display_;
  ZipReader zip_;
  PickleGraph graph_;
};

}  // namespace shardlight::sharded::checkpoint::pytorch

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_TORCH_SAVE_PAYLOAD_H_
