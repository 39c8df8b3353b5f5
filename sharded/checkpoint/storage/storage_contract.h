// Checks, as gtest expectations, the parts of the storage seam's contract
// (storage.h) every implementation must keep, so each is held to the same
// test: POSIX and in memory (../storage_test.cc), S3 (s3/).
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_STORAGE_CONTRACT_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_STORAGE_CONTRACT_H_

#include <string>

#include "sharded/checkpoint/storage/storage.h"

namespace shardlight::sharded::checkpoint {

// Directories under `root` (which must exist and be empty): a checkpoint
// root's retention lists subdirectories and removes empty ones, never a full
// one.
void ExpectDirectoryContract(Storage& s, const std::string& root);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_STORAGE_CONTRACT_H_
