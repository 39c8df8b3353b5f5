// The pieces of a PyTorch distributed checkpoint (DCP) directory that every
// writer shares, collective (SaveDcpCheckpoint) or one process
// (WriteDcpCheckpoint): the torch.save payloads of a .distcp data file, the
// pickled .metadata, its atomic commit, and the removal of stale data files.
// No communication.
//
// What torch's FileSystemWriter writes, as torch 2.x's DefaultSavePlanner
// does: a tensor chunk is torch.save(chunk) (a zip of data.pkl, byteorder and
// data/0); a non-tensor value is torch.save(value) (a zip holding only
// data.pkl), its .metadata entry a BytesStorageMetadata and its storage key
// MetadataIndex(fqn) with no offset; dcp.load rebuilds it with torch.load.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_DCP_DCP_FILES_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_DCP_DCP_FILES_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sharded/checkpoint/interop/dcp/dcp_metadata.h"
#include "sharded/checkpoint/storage/storage.h"
#include "sharded/plain_value.h"

namespace shardlight::sharded::checkpoint::dcp {

// One entry of .metadata: a tensor (dtype, global size, chunks) or a
// non-tensor value (`is_value`, one payload).
struct DcpEntry {
  std::string key;
  bool is_value = false;
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> size;
  std::vector<DcpChunk> chunks;  // tensors
  DcpItem value;                 // values
};

// Appends torch.save(chunk) for `data` (a CPU tensor of the chunk's sizes)
// to `file` at `pos`; returns the payload's length. InvalidArgument naming
// `key` for a dtype torch.save cannot write; the file's I/O errors.
absl::StatusOr<int64_t> AppendTensorPayload(File& file, int64_t pos, const std::string& key, const at::Tensor& data);

// Appends torch.save(value) to `file` at `pos`; returns its length.
absl::StatusOr<int64_t> AppendValuePayload(File& file, int64_t pos, const PlainValue& value);

// The pickled Metadata of the whole checkpoint, entries in the given order
// (each key its own one-part path in planner_data: flat keys). Internal for
// a tensor entry without chunks.
absl::StatusOr<std::string> DcpMetadataPickle(const std::vector<DcpEntry>& entries);

// Commits `pickle` as dir/.metadata: under a temporary name, renamed into
// place (`exclusive`: created with the store's create-if-absent, losing to a
// save that committed first with AlreadyExists), then the directory fsynced.
// `committed` is set once .metadata is in place (an error after that: the
// checkpoint is there but may not be durable).
absl::Status CommitDcpMetadata(Storage& storage, const std::string& dir, const std::string& pickle, bool exclusive,
                               bool* committed);

// After a commit: removes the "__*.distcp" files of `dir` not in `keep`;
// returns how many it removed.
absl::StatusOr<int> RemoveStaleDcpFiles(Storage& storage, const std::string& dir, const std::set<std::string>& keep);

// Why RemoveStaleDcpFiles removed files, for a RemovalLine.
constexpr char kStaleDcpFilesWhy[] =
    "data files of an earlier DCP checkpoint (or a failed save) that the new .metadata does not name";

}  // namespace shardlight::sharded::checkpoint::dcp

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_DCP_DCP_FILES_H_
