// OfflineCheckpointWriter: writes a shardlight checkpoint (FORMAT.md) from
// one process, without a process group, for any target world size -- what
// importers (`ckpt import`) and offline resharding use. The output is the
// same as SaveCheckpoint's: one data file per rank, dense tensors in rank 0's
// file, per-block CRC32C, and the same commit discipline: data files are
// written under temporary names and fsynced, renamed, then index.json is
// written under a temporary name, fsynced and renamed into place last (the
// commit point), and the directory fsynced. A failure before the commit
// removes what it wrote and leaves a previous checkpoint in the directory
// untouched; after a durable commit, files the new index does not name are
// removed (as SaveCheckpoint does).
//
// Tensors are held by reference (at::Tensor views share storage) until
// Commit, which streams them out through WriteDataFile's bounded buffer. A
// tensor may instead be given as a TensorSource, whose bytes are produced
// tile by tile while Commit writes them: then the writer's memory stays at
// its buffer whatever the checkpoint's size (what `ckpt reshard` relies on).
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_OFFLINE_OFFLINE_WRITER_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_OFFLINE_OFFLINE_WRITER_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "sharded/checkpoint/format/data_file.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/format/run_record.h"
#include "sharded/shard_metadata.h"

namespace shardlight::sharded::checkpoint {

struct OfflineWriterOptions {
  int64_t checksum_block_bytes = 256 << 10;  // 64 B .. 64 MiB, as SaveOptions
  int64_t buffer_bytes = 16 << 20;           // staging for non-contiguous tensors
  bool remove_stale_files = true;
  // The index's "run" (run_record.h): what produced the tensors. `ckpt
  // reshard` carries its input's, so a resharded checkpoint resumes as the
  // run that saved it. An invalid record fails Commit.
  RunRecord run;
};

// A tensor not in memory: its dtype and global sizes, and `fill`, which
// fills a contiguous CPU tile with the box of the global tensor at the
// given offsets (called during Commit, once per tile written; its error
// fails the commit, which then leaves nothing behind).
struct TensorSource {
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> sizes;
  RegionFill fill;
};

struct OfflineWriteStats {
  int64_t bytes_written = 0;  // all data files
  int files = 0;
};

class OfflineCheckpointWriter {
 public:
  // `world_size` is the number of ranks the checkpoint is written for (1..65536).
  OfflineCheckpointWriter(std::string dir, int world_size, OfflineWriterOptions options = {});

  // A dense tensor (any dtype a checkpoint holds), written once in rank 0's file.
  absl::Status AddDense(const std::string& key, const at::Tensor& tensor);

  // A sharded tensor: `metadata` (validated; every placement rank below the
  // world size) and one tensor per shard, in the metadata's order, each of
  // the shard's sizes and the metadata's dtype.
  absl::Status AddSharded(const std::string& key, const ShardedTensorMetadata& metadata,
                          std::vector<at::Tensor> shards);

  // `full` split along `dim` over every rank as torch.chunk splits it
  // (ChunkShardingSpec::OnRanks); the shards are views, nothing is copied.
  absl::Status AddChunked(const std::string& key, const at::Tensor& full, int64_t dim);

  // As AddDense and AddChunked, with the bytes read from `source` during
  // Commit, one bounded tile at a time.
  absl::Status AddDense(const std::string& key, TensorSource source);
  absl::Status AddChunked(const std::string& key, TensorSource source, int64_t dim);

  // A non-tensor value (FORMAT.md "values"), in the index; values keep the
  // order they are added in. InvalidArgument for a bad key, a key added
  // before, or a value PlainValue::Validate refuses.
  absl::Status AddValue(const std::string& key, PlainValue value);

  // Writes every rank's data file and commits the index. Call once; the
  // tensors added are released afterwards whatever the outcome.
  absl::Status Commit(OfflineWriteStats* stats = nullptr);

  int world_size() const { return world_size_; }
  size_t size() const { return tensors_.size(); }

 private:
  struct Pending {
    std::string key;
    bool sharded = false;
    ShardedTensorMetadata metadata;  // a single shard on rank 0 when dense
    std::vector<at::Tensor> shards;  // empty when the tensor comes from `source`
    RegionFill source;               // global coordinates
  };
  absl::Status CheckNewKey(const std::string& key);
  absl::Status CheckDtype(const std::string& key, c10::ScalarType dtype, bool sharded) const;
  absl::StatusOr<ShardedTensorMetadata> ChunkedMetadata(const std::string& key, c10::ScalarType dtype,
                                                        const std::vector<int64_t>& sizes, int64_t dim) const;
  absl::Status AddPending(Pending p);
  absl::Status CommitUnsafe(OfflineWriteStats* stats, std::vector<std::string>* written);

  std::string dir_;
  int world_size_;
  OfflineWriterOptions options_;
  std::vector<Pending> tensors_;
  std::vector<IndexValue> values_;
  std::set<std::string> keys_;
  bool committed_ = false;
};

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_OFFLINE_OFFLINE_WRITER_H_
