#include "sharded/checkpoint/interop/open_checkpoint.h"

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/interop/dcp/dcp_checkpoint.h"

namespace shardlight::sharded::checkpoint {

absl::StatusOr<CheckpointReader> OpenCheckpointForRead(const std::string& dir, Storage& storage) {
  if (storage.Exists(JoinPath(dir, kIndexFileName))) return CheckpointReader::Open(dir, storage);
  if (dcp::IsDcpCheckpoint(dir, storage)) return dcp::OpenDcpCheckpoint(dir, storage);
  return absl::NotFoundError(absl::StrCat("no checkpoint at '", dir, "': ", kIndexFileName, " is missing (nor is ",
                                          dcp::kDcpMetadataFileName, ", a PyTorch distributed checkpoint's)"));
}

bool HasReadableCheckpoint(const std::string& dir, Storage& storage) {
  return storage.Exists(JoinPath(dir, kIndexFileName)) || dcp::IsDcpCheckpoint(dir, storage);
}

}  // namespace shardlight::sharded::checkpoint
