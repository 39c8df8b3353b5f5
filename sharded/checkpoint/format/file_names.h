// The names a save gives its files inside the checkpoint directory. Every
// save has a fresh generation, so its data files never replace the files of
// the checkpoint that is still current; temporary files start with '.' and
// are never named by an index.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_FILE_NAMES_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_FILE_NAMES_H_

#include <string>

#include "absl/strings/string_view.h"

namespace shardlight::sharded::checkpoint {

// "data-<generation>-r00003.safetensors"
std::string DataFileName(const std::string& generation, int rank);
// ".tmp-<generation>-r00003.safetensors"
std::string TempDataFileName(const std::string& generation, int rank);
// ".tmp-<generation>-index.json"
std::string TempIndexFileName(const std::string& generation);
// Whether `name` has the exact form of a data or temporary file a save makes
// (and so may be deleted by a later save when no index references it).
bool IsCheckpointFileName(absl::string_view name);
// A fresh generation: 16 hex digits from the clock and a random device.
std::string NewGeneration();

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_FILE_NAMES_H_
