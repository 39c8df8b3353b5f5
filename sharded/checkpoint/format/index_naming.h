// The two halves of ValidateIndexNaming (index.h), for ValidateIndex, which
// checks each shard's names in the same pass as the rest of the shard: the
// files' names once, then every shard against the file its name resolved to.
// Internal to the format library (a srcs header).
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_INDEX_NAMING_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_INDEX_NAMING_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "sharded/checkpoint/format/index.h"

namespace shardlight::sharded::checkpoint::internal {

// The generation is 16 lowercase hex digits and every file is named
// data-<generation>-r<rank>.safetensors for its own rank. InvalidArgument.
absl::Status ValidateFileNaming(const CheckpointIndex& index, const std::string& display_name);

// Shard `k` of `t` names the entry "<key>/shard-<k>" (a dense tensor:
// "<key>") and lies in its rank's file. `file` is the file its `file` member
// names, from an index ValidateFileNaming accepted: a file is then its rank's
// exactly when its rank is the shard's, so no name is compared or built.
// InvalidArgument naming the key.
absl::Status ValidateShardNaming(const IndexTensor& t, size_t k, const IndexFile& file,
                                 const std::string& display_name);

}  // namespace shardlight::sharded::checkpoint::internal

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_INDEX_NAMING_H_
