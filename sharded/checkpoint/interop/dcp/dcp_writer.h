// Saving a StateDict as a PyTorch distributed checkpoint (DCP): a directory
// that torch.distributed.checkpoint.load reads at any world size, into plain
// tensors or DTensor-sharded state dicts, bit-exactly, and that
// torch.distributed.checkpoint.format_utils.dcp_to_torch_save converts.
//
// Layout, as torch's FileSystemWriter writes it: each rank one data file of
// torch.save payloads, one per chunk it holds (its local shards; dense
// tensors are written by rank 0), and a .metadata file (a pickled Metadata:
// every key's dtype, size and chunks, and where each payload is; the keys
// are the state dict's, flat, as DCP flattens nested dicts).
//
// Atomic like SaveCheckpoint: data files get names unique to the save
// ("__<rank>_<generation>.distcp", so an earlier checkpoint's are never
// overwritten), each is fsynced, the ranks agree, and rank 0 writes
// .metadata under a temporary name, fsyncs it and renames it into place
// last, then fsyncs the directory: until that rename the previous
// checkpoint is the one a load sees. Then rank 0 removes the .distcp files
// the new .metadata does not name (told to SaveOptions::on_removed).
//
// Errors are the same on every rank and name the failing rank: those of
// SaveCheckpoint's planning (bad keys, ranks disagreeing on the dict's
// structure), a dtype DCP cannot hold, a directory that holds a shardlight
// checkpoint (index.json: a load would read that one), any I/O error.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_DCP_DCP_WRITER_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_DCP_DCP_WRITER_H_

#include <string>

#include "absl/status/status.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/state_dict.h"

namespace shardlight::sharded::checkpoint::dcp {

// Collective. Uses options.storage (null: DefaultStorage(), s3:// on S3) and options.on_removed;
// the other SaveOptions are shardlight's format's own.
absl::Status SaveDcpCheckpoint(const StateDict& state_dict, const std::string& dir, c10d::ProcessGroup& pg,
                               const SaveOptions& options = {});

}  // namespace shardlight::sharded::checkpoint::dcp

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_DCP_DCP_WRITER_H_
