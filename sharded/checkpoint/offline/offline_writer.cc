// OfflineCheckpointWriter: plan, write each rank's file, rename, commit.
// One comment per step; the steps are SaveCheckpoint's, run by one process.
#include "sharded/checkpoint/offline/offline_writer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/format/data_file.h"
#include "sharded/checkpoint/format/dtype_names.h"
#include "sharded/checkpoint/format/file_names.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/no_throw.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "sharded/checkpoint/storage/posix_file.h"
#include "sharded/sharding_spec.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {
namespace {

std::string KeyError(const std::string& key) { return absl::StrCat("key ", Quote(key), ": "); }

// The entry of one shard of a tensor that comes from a source: tiles of the
// shard are the source's boxes moved by the shard's offsets.
EntryToWrite SourceEntry(const std::string& name, c10::ScalarType dtype, const ShardMetadata& shard,
                         const RegionFill& source) {
  EntryToWrite e;
  e.name = name;
  e.dtype = dtype;
  e.sizes.assign(shard.sizes.begin(), shard.sizes.end());
  e.fill = [&source, offsets = shard.offsets](const std::vector<int64_t>& off, const at::Tensor& tile) {
    std::vector<int64_t> global(offsets.begin(), offsets.end());
    for (size_t d = 0; d < global.size(); ++d) global[d] += off[d];
    return source(global, tile);
  };
  return e;
}

}  // namespace

OfflineCheckpointWriter::OfflineCheckpointWriter(std::string dir, int world_size, OfflineWriterOptions options)
    : dir_(std::move(dir)), world_size_(world_size), options_(options) {}

absl::Status OfflineCheckpointWriter::CheckNewKey(const std::string& key) {
  if (committed_) return absl::FailedPreconditionError("the offline checkpoint writer has already committed");
  SL_RETURN_IF_ERROR(ValidateKey(key));
  if (keys_.count(key) != 0) return absl::InvalidArgumentError(KeyError(key) + "added twice");
  return absl::OkStatus();
}

absl::Status OfflineCheckpointWriter::CheckDtype(const std::string& key, c10::ScalarType dtype, bool sharded) const {
  if (DtypeName(dtype).empty() || (sharded && !IsSupportedDtype(dtype))) {
    return absl::InvalidArgumentError(absl::StrCat(KeyError(key), "dtype ", c10::toString(dtype),
                                                   sharded ? " cannot be sharded in a checkpoint" : " cannot be checkpointed"));
  }
  return absl::OkStatus();
}

absl::Status OfflineCheckpointWriter::AddPending(Pending p) {
  keys_.insert(p.key);
  tensors_.push_back(std::move(p));
  return absl::OkStatus();
}

absl::Status OfflineCheckpointWriter::AddDense(const std::string& key, const at::Tensor& tensor) {
  SL_RETURN_IF_ERROR(CheckNewKey(key));
  if (!tensor.defined()) return absl::InvalidArgumentError(KeyError(key) + "the tensor is undefined");
  SL_RETURN_IF_ERROR(CheckDtype(key, tensor.scalar_type(), /*sharded=*/false));
  Pending p;
  p.key = key;
  p.metadata.sizes = tensor.sizes().vec();
  p.metadata.properties.dtype = tensor.scalar_type();
  p.metadata.shards.push_back({std::vector<int64_t>(tensor.dim(), 0), tensor.sizes().vec(), Placement::Cpu(0)});
  p.shards.push_back(tensor);
  return AddPending(std::move(p));
}

absl::Status OfflineCheckpointWriter::AddDense(const std::string& key, TensorSource source) {
  SL_RETURN_IF_ERROR(CheckNewKey(key));
  if (!source.fill) return absl::InvalidArgumentError(KeyError(key) + "the source has no fill function");
  for (int64_t n : source.sizes) {
    if (n < 0) return absl::InvalidArgumentError(absl::StrCat(KeyError(key), "negative size ", n));
  }
  SL_RETURN_IF_ERROR(CheckDtype(key, source.dtype, /*sharded=*/false));
  Pending p;
  p.key = key;
  p.metadata.sizes = source.sizes;
  p.metadata.properties.dtype = source.dtype;
  p.metadata.shards.push_back({std::vector<int64_t>(source.sizes.size(), 0), source.sizes, Placement::Cpu(0)});
  p.source = std::move(source.fill);
  return AddPending(std::move(p));
}

absl::Status OfflineCheckpointWriter::AddSharded(const std::string& key, const ShardedTensorMetadata& metadata,
                                                 std::vector<at::Tensor> shards) {
  SL_RETURN_IF_ERROR(CheckNewKey(key));
  const c10::ScalarType dtype = metadata.properties.dtype;
  SL_RETURN_IF_ERROR(CheckDtype(key, dtype, /*sharded=*/true));
  absl::Status s = metadata.Validate();
  if (!s.ok()) return absl::InvalidArgumentError(KeyError(key) + std::string(s.message()));
  if (shards.size() != metadata.shards.size()) {
    return absl::InvalidArgumentError(absl::StrCat(KeyError(key), shards.size(), " shard tensors for ",
                                                   metadata.shards.size(), " shards of the metadata"));
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    const ShardMetadata& m = metadata.shards[i];
    if (m.placement.rank < 0 || m.placement.rank >= world_size_) {
      return absl::InvalidArgumentError(absl::StrCat(KeyError(key), "shard ", i, " is placed on ",
                                                     m.placement.ToString(), " but the checkpoint is written for ",
                                                     world_size_, " ranks"));
    }
    if (!shards[i].defined() || !SameDims(shards[i].sizes().vec(), m.sizes) || shards[i].scalar_type() != dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat(KeyError(key), "shard tensor ", i, " does not match shard ", m.ToString()));
    }
  }
  Pending p;
  p.key = key;
  p.sharded = true;
  p.metadata = metadata;
  p.shards = std::move(shards);
  return AddPending(std::move(p));
}

absl::StatusOr<ShardedTensorMetadata> OfflineCheckpointWriter::ChunkedMetadata(const std::string& key,
                                                                               c10::ScalarType dtype,
                                                                               const std::vector<int64_t>& sizes,
                                                                               int64_t dim) const {
  if (dim < 0 || dim >= static_cast<int64_t>(sizes.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(KeyError(key), "cannot shard dim ", dim, " of a tensor with ", sizes.size(), " dims"));
  }
  TensorProperties properties;
  properties.dtype = dtype;
  auto metadata = BuildMetadata(ChunkShardingSpec::OnRanks(dim, world_size_), sizes, properties, world_size_);
  if (!metadata.ok()) return absl::InvalidArgumentError(KeyError(key) + std::string(metadata.status().message()));
  return metadata;
}

absl::Status OfflineCheckpointWriter::AddChunked(const std::string& key, const at::Tensor& full, int64_t dim) {
  if (!full.defined()) return absl::InvalidArgumentError(KeyError(key) + "the tensor is undefined");
  SL_ASSIGN_OR_RETURN(ShardedTensorMetadata metadata, ChunkedMetadata(key, full.scalar_type(), full.sizes().vec(), dim));
  std::vector<at::Tensor> shards;
  for (const ShardMetadata& m : metadata.shards) shards.push_back(full.narrow(dim, m.offsets[dim], m.sizes[dim]));
  return AddSharded(key, metadata, std::move(shards));
}

absl::Status OfflineCheckpointWriter::AddChunked(const std::string& key, TensorSource source, int64_t dim) {
  SL_RETURN_IF_ERROR(CheckNewKey(key));
  if (!source.fill) return absl::InvalidArgumentError(KeyError(key) + "the source has no fill function");
  SL_RETURN_IF_ERROR(CheckDtype(key, source.dtype, /*sharded=*/true));
  SL_ASSIGN_OR_RETURN(ShardedTensorMetadata metadata, ChunkedMetadata(key, source.dtype, source.sizes, dim));
  Pending p;
  p.key = key;
  p.sharded = true;
  p.metadata = std::move(metadata);
  p.source = std::move(source.fill);
  return AddPending(std::move(p));
}

absl::Status OfflineCheckpointWriter::AddValue(const std::string& key, PlainValue value) {
  SL_RETURN_IF_ERROR(CheckNewKey(key));
  if (absl::Status s = value.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(KeyError(key), "the value cannot be checkpointed: ", s.message()));
  }
  keys_.insert(key);
  values_.push_back({key, std::move(value)});
  return absl::OkStatus();
}

absl::Status OfflineCheckpointWriter::Commit(OfflineWriteStats* stats) {
  if (committed_) return absl::FailedPreconditionError("the offline checkpoint writer has already committed");
  committed_ = true;
  std::vector<std::string> written;  // files to remove if the commit does not happen
  absl::Status s = NoThrow([&] { return CommitUnsafe(stats, &written); });
  for (const std::string& path : written) DefaultStorage().Remove(path).IgnoreError();
  tensors_.clear();
  values_.clear();
  keys_.clear();
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat("offline checkpoint write to '", dir_, "': ", s.message()));
  return s;
}

absl::Status OfflineCheckpointWriter::CommitUnsafe(OfflineWriteStats* stats, std::vector<std::string>* written) {
  if (world_size_ < 1 || world_size_ > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", world_size_, " is not in [1, 65536]"));
  }
  if (options_.checksum_block_bytes < kMinBlockBytes || options_.checksum_block_bytes > kMaxBlockBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("checksum_block_bytes must be in [", kMinBlockBytes, ", ", kMaxBlockBytes, "]"));
  }
  SL_RETURN_IF_ERROR(ValidateRunRecord(options_.run));
  SL_RETURN_IF_ERROR(DefaultStorage().MakeDirectories(dir_));
  const std::string generation = NewGeneration();
  CheckpointIndex index;
  index.world_size = world_size_;
  index.generation = generation;
  index.block_bytes = options_.checksum_block_bytes;
  index.run = options_.run;
  index.values = values_;
  for (const Pending& p : tensors_) {
    IndexTensor t;
    t.key = p.key;
    t.sharded = p.sharded;
    t.dtype = p.metadata.properties.dtype;
    t.shape = p.metadata.sizes;
    for (const ShardMetadata& m : p.metadata.shards) {
      IndexShard shard;
      shard.offsets = m.offsets;
      shard.sizes = m.sizes;
      shard.rank = m.placement.rank;
      // Its file and entry are the ones this format derives (no name set).
      t.shards.push_back(std::move(shard));
    }
    index.tensors.push_back(std::move(t));
  }

  // Step 1: each rank's data file under its temporary name, fsynced.
  DataFileOptions file_options;
  file_options.block_bytes = options_.checksum_block_bytes;
  file_options.buffer_bytes = options_.buffer_bytes;
  OfflineWriteStats totals;
  for (int rank = 0; rank < world_size_; ++rank) {
    std::vector<EntryToWrite> entries;
    std::vector<IndexShard*> targets;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Pending& p = tensors_[i];
      for (size_t j = 0; j < p.metadata.shards.size(); ++j) {
        IndexShard& shard = index.tensors[i].shards[j];
        if (shard.rank != rank) continue;
        if (p.source) {
          entries.push_back(SourceEntry(ShardEntryName(index.tensors[i], j), p.metadata.properties.dtype,
                                        p.metadata.shards[j], p.source));
        } else {
          entries.push_back({ShardEntryName(index.tensors[i], j), p.shards[j]});
        }
        targets.push_back(&shard);
      }
    }
    file_options.metadata = {{"format", "shardlight.checkpoint"},
                             {"version", std::to_string(kFormatVersion)},
                             {"rank", std::to_string(rank)}};
    const std::string temp = JoinPath(dir_, TempDataFileName(generation, rank));
    SL_ASSIGN_OR_RETURN(const auto file, WriteDataFile(temp, entries, file_options));
    written->push_back(temp);
    for (size_t e = 0; e < targets.size(); ++e) {
      targets[e]->begin = file.entries[e].begin;
      targets[e]->end = file.entries[e].end;
      targets[e]->block_crcs.assign(file.entries[e].block_crcs.begin(), file.entries[e].block_crcs.end());
    }
    index.files.push_back({DataFileName(generation, rank), rank, file.bytes, file.header_bytes});
    totals.bytes_written += file.bytes;
    ++totals.files;
  }
  index.Reindex();
  SL_RETURN_IF_ERROR(ValidateIndex(index, "new index"));  // never commit what a load would refuse

  // Step 2: every data file to its final name (still unreferenced), durably.
  for (int rank = 0; rank < world_size_; ++rank) {
    const std::string final_path = JoinPath(dir_, DataFileName(generation, rank));
    SL_RETURN_IF_ERROR(DefaultStorage().Rename(JoinPath(dir_, TempDataFileName(generation, rank)), final_path));
    (*written)[rank] = final_path;
  }
  SL_RETURN_IF_ERROR(DefaultStorage().SyncDirectory(dir_));

  // Step 3: the index under its temporary name, fsynced, renamed over
  // index.json (the commit point), and the directory fsynced.
  const std::string text = SerializeIndex(index);
  const std::string temp_index = JoinPath(dir_, TempIndexFileName(generation));
  {
    SL_ASSIGN_OR_RETURN(auto file, File::CreateNew(DefaultStorage(), temp_index));
    written->push_back(temp_index);
    SL_RETURN_IF_ERROR(file.WriteAt(text.data(), static_cast<int64_t>(text.size()), 0));
    SL_RETURN_IF_ERROR(file.Sync());
    SL_RETURN_IF_ERROR(file.Close());
  }
  SL_RETURN_IF_ERROR(DefaultStorage().Rename(temp_index, JoinPath(dir_, kIndexFileName)));
  written->clear();  // committed: the files are the checkpoint's now
  // Not SL_RETURN_IF_ERROR: past the commit point the error must say so.
  const absl::Status s = DefaultStorage().SyncDirectory(dir_);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("the new checkpoint is committed (", kIndexFileName,
                                               " was renamed into place) but may not be durable: ", s.message()));
  }

  // Step 4: files of earlier checkpoints and failed saves, now unreferenced.
  if (options_.remove_stale_files) {
    auto names = DefaultStorage().List(dir_);
    if (names.ok()) {
      for (const std::string& name : *names) {
        if (IsCheckpointFileName(name) && index.FindFile(name) == nullptr) DefaultStorage().Remove(JoinPath(dir_, name)).IgnoreError();
      }
    }
  }
  if (stats != nullptr) *stats = totals;
  return absl::OkStatus();
}

}  // namespace shardlight::sharded::checkpoint
