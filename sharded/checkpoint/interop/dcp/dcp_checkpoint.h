// A PyTorch distributed checkpoint (DCP) directory opened for reading as a
// CheckpointReader: LoadCheckpoint and the ckpt tool read it as they read
// their own format (any world size, every LoadOptions selection, resharding
// into ShardedTensors and dense tensors), each rank reading only the files
// and byte ranges its shards overlap.
//
// The index comes from .metadata (dcp_metadata.h): one shard per chunk, in
// the .distcp file its payload is in. A chunk's payload is located on the
// chunk's first use (CheckpointReader::OpenShard; its zip directory and
// pickle read, nothing else: torch_save_payload.h), so a rank reads the
// headers of the payloads it loads only; it must be a tensor of the chunk's
// dtype and sizes, stored row-major. DCP stores
// no checksums: what the bytes hold is not verified (CheckpointReader::
// checksummed() is false).
//
// Errors name the directory, file and key: no .metadata (NotFound), a
// .metadata that is not a regular file or is too large (FailedPrecondition),
// every ParseDcpMetadata error, a key this library cannot hold
// (ValidateKey), chunks that overlap or leave holes, a missing .distcp
// (NotFound, when a rank needs it), a truncated one (DataLoss), a payload
// that is not the chunk it should be.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_DCP_DCP_CHECKPOINT_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_DCP_DCP_CHECKPOINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sharded/checkpoint/format/checkpoint_reader.h"
#include "sharded/checkpoint/interop/dcp/dcp_metadata.h"
#include "sharded/checkpoint/storage/storage.h"
#include "sharded/plain_value.h"

namespace shardlight::sharded::checkpoint::dcp {

inline constexpr char kDcpFormatName[] = "PyTorch DCP";
// The unit a DCP chunk is read in (it has no checksum blocks).
inline constexpr int64_t kDcpReadBlockBytes = int64_t{1} << 20;

// Whether `dir` holds a DCP checkpoint: a .metadata entry is there (of any
// kind: a broken one is a checkpoint to report, not an absent one). Local.
bool IsDcpCheckpoint(const std::string& dir, Storage& storage);

// DIR/.metadata read and decoded.
absl::StatusOr<DcpMetadata> ReadDcpMetadata(const std::string& dir, Storage& storage);

// Reads DIR/.metadata and returns the reader (data files open on use). Its
// index holds the plain non-tensor entries as values (ReadDcpValues: every
// value payload is read), and names in not_carried the others and those
// whose key this format cannot hold.
absl::StatusOr<CheckpointReader> OpenDcpCheckpoint(const std::string& dir, Storage& storage);

// A non-tensor entry read back: `value` the plain value (pickle_values.h),
// `repr` Python's repr of it ("7", "0.001", "'adamw'", "b'\\x80'",
// "{'lr': 0.001, 'betas': (0.9, 0.999)}"); `integer` is set when it is an
// int (or a bool). An entry that is no plain value (a class instance, a
// tensor inside a value) has `not_carried` saying what it holds, and `repr`
// "<not carried: ...>".
struct DcpPlainValue {
  std::string key;
  std::string repr;
  std::optional<int64_t> integer;
  PlainValue value;
  std::string not_carried;
};

// Every non-tensor entry of the checkpoint, in save order, read by the
// restricted pickle reader (nothing is run). A payload that is not a
// torch.save archive, or a malformed pickle, is an error naming the key.
absl::StatusOr<std::vector<DcpPlainValue>> ReadDcpValues(const std::string& dir, Storage& storage,
                                                         const DcpMetadata& metadata);

}  // namespace shardlight::sharded::checkpoint::dcp

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_DCP_DCP_CHECKPOINT_H_
