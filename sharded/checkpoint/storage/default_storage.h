// DefaultStorage(): what a checkpoint location means when no Storage is given
// in the options -- the one place a location picks its storage. Paths of the
// form s3://bucket/key go to S3 (an S3Storage whose client is configured from
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION and
// AWS_ENDPOINT_URL as read at the operation, one client per configuration,
// kept for the process); every other path goes to PosixStorage(). So
// SaveCheckpoint, LoadCheckpoint, checkpoint roots and their retention, the
// async checkpointer, the Trainer's checkpoint_dir, the DCP reader and
// writer and the ckpt tool all take s3:// locations unchanged.
//
// Errors: those of the storage the path goes to. An s3:// path without a
// usable configuration fails every operation with InvalidArgument naming the
// path and the missing or malformed variable; a Rename between an s3:// path
// and a local one is InvalidArgument naming both.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_DEFAULT_STORAGE_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_DEFAULT_STORAGE_H_

#include <string>

#include "absl/status/status.h"
#include "sharded/checkpoint/storage/storage.h"

namespace shardlight::sharded::checkpoint {

// A process-wide instance; thread-safe.
Storage& DefaultStorage();

// OK for a local path; for an s3:// location, InvalidArgument naming it and
// the missing or malformed AWS_* variable when there is no usable
// configuration. For callers that ask Exists() first, which cannot say why
// it is false.
absl::Status CheckLocation(const std::string& location);

// CheckLocation, and for an s3:// location one request that proves the
// configuration works there (a ListObjectsV2 of at most one key under the
// location): wrong credentials, a missing bucket, a skewed clock or an
// unreachable endpoint fail here, naming the location and S3's error code,
// instead of at the first write. For a job that should fail at its start.
absl::Status ProbeLocation(const std::string& location);

// `storage`, or DefaultStorage() when it is null: what the options' default
// means.
Storage& StorageOrDefault(Storage* storage);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_DEFAULT_STORAGE_H_
