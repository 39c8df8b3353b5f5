// Any checkpoint directory this library reads, opened by one process: its
// own format (index.json, FORMAT.md) or a PyTorch distributed checkpoint
// (.metadata, interop/dcp). LoadCheckpoint and the ckpt tool open what they
// read through this. Local: no communication.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_OPEN_CHECKPOINT_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_OPEN_CHECKPOINT_H_

#include <string>

#include "absl/status/statusor.h"
#include "sharded/checkpoint/format/checkpoint_reader.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "sharded/checkpoint/storage/storage.h"

namespace shardlight::sharded::checkpoint {

// index.json first (a directory holding both is read as shardlight's: its
// index is the commit of its own save), then .metadata. NotFound naming both
// when neither is there; otherwise the errors of CheckpointReader::Open or
// dcp::OpenDcpCheckpoint.
absl::StatusOr<CheckpointReader> OpenCheckpointForRead(const std::string& dir, Storage& storage = DefaultStorage());

// Whether `dir` holds a checkpoint of either format (an entry named
// index.json or .metadata is there, readable or not).
bool HasReadableCheckpoint(const std::string& dir, Storage& storage = DefaultStorage());

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_OPEN_CHECKPOINT_H_
