// The .metadata file of a PyTorch distributed checkpoint (DCP,
// torch.distributed.checkpoint, as torch 2.x's FileSystemWriter writes it):
// a pickled Metadata dataclass. It is read by the restricted ReadPickle
// (nothing is ever run) and decoded here by a strict whitelist of DCP's own
// metadata classes:
//   torch.distributed.checkpoint.metadata: Metadata, TensorStorageMetadata,
//     BytesStorageMetadata, ChunkStorageMetadata, TensorProperties,
//     MetadataIndex, StorageMeta, _MEM_FORMAT_ENCODING (through getattr)
//   torch.distributed.checkpoint.filesystem._StorageInfo
//   torch.Size, torch.<dtype>, torch.serialization._get_layout,
//   pathlib paths (StorageMeta's checkpoint_id)
// Any other class anywhere in the pickle is InvalidArgument naming it.
//
// What it yields: every state-dict key in save order, a tensor (dtype,
// global size, chunks, each with the .distcp file and byte range of its
// torch.save payload) or a pickled value (a byte range too). planner_data
// and storage_meta are checked for classes and otherwise ignored.
//
// Errors name the file and the key: unknown or unsupported dtypes, sizes
// that are not non-negative integers, chunks outside their tensor, a chunk
// or value without a storage entry (or a storage entry for nothing), file
// names that are not plain names of the checkpoint directory, negative or
// overflowing byte ranges, storage transforms (compression, encryption:
// Unimplemented), a DCP version newer than 1.x (FailedPrecondition).
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_DCP_DCP_METADATA_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_DCP_DCP_METADATA_H_

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardlight::sharded::checkpoint::dcp {

constexpr char kDcpMetadataFileName[] = ".metadata";
// A .metadata file larger than this is refused unread.
constexpr int64_t kMaxDcpMetadataBytes = int64_t{256} << 20;

// Where one torch.save payload is: bytes [offset, offset + length) of a file
// of the checkpoint directory.
struct DcpItem {
  std::string file;
  int64_t offset = 0;
  int64_t length = 0;
};

struct DcpChunk {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
  DcpItem item;
};

struct DcpTensor {
  std::string key;
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> size;
  std::vector<DcpChunk> chunks;
};

// A non-tensor entry (an int, a float, a string, a dict of them, ...): a
// pickled value in its own payload.
struct DcpValue {
  std::string key;
  DcpItem item;
};

struct DcpMetadata {
  std::string version;  // "1.0.0"; empty when the writer recorded none (torch < 2.4)
  std::vector<DcpTensor> tensors;  // save order
  std::vector<DcpValue> values;    // save order
  int64_t bytes = 0;               // the .metadata file's size
};

// Decodes .metadata's bytes; `display` (its path) starts every error.
// InvalidArgument also for bytes after the pickle's STOP opcode (torch would
// ignore them; no writer puts any there).
absl::StatusOr<DcpMetadata> ParseDcpMetadata(absl::string_view bytes, const std::string& display);

// The dtype of "torch.float32", "torch.bfloat16", ... when this library
// stores it; false otherwise.
bool DcpDtype(absl::string_view torch_name, c10::ScalarType* dtype);
// The inverse: "float32" for kFloat (torch's attribute name); "" for a dtype
// DcpDtype does not accept.
std::string DcpDtypeName(c10::ScalarType dtype);

}  // namespace shardlight::sharded::checkpoint::dcp

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_DCP_DCP_METADATA_H_
