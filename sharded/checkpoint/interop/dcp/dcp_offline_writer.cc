#include "sharded/checkpoint/interop/dcp/dcp_offline_writer.h"

#include <ATen/ATen.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/format/file_names.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/checkpoint/interop/dcp/dcp_files.h"
#include "sharded/checkpoint/interop/dcp/dcp_metadata.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "sharded/no_throw.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint::dcp {

OfflineDcpWriter::OfflineDcpWriter(std::string dir, int world_size, Storage* storage)
    : dir_(std::move(dir)), world_size_(world_size), storage_(&StorageOrDefault(storage)) {}

absl::Status OfflineDcpWriter::CheckNewKey(const std::string& key) {
  if (key.empty()) return absl::InvalidArgumentError("an empty key");
  if (!keys_.insert(key).second) return absl::InvalidArgumentError(absl::StrCat("key ", Quote(key), " added twice"));
  return absl::OkStatus();
}

absl::Status OfflineDcpWriter::AddTensor(const std::string& key, c10::ScalarType dtype, std::vector<int64_t> sizes,
                                         RegionFill fill, int64_t dim) {
  if (DcpDtypeName(dtype).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", Quote(key), ": dtype ", c10::toString(dtype), " cannot be saved in a DCP checkpoint"));
  }
  if (dim >= static_cast<int64_t>(sizes.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", Quote(key), ": cannot chunk along dim ", dim, " of a ", sizes.size(), "-d tensor"));
  }
  SL_RETURN_IF_ERROR(CheckNewKey(key));
  Pending p;
  p.key = key;
  p.dtype = dtype;
  p.sizes = std::move(sizes);
  p.fill = std::move(fill);
  p.dim = dim;
  pending_.push_back(std::move(p));
  return absl::OkStatus();
}

absl::Status OfflineDcpWriter::AddValue(const std::string& key, PlainValue value) {
  absl::Status valid = value.Validate();
  if (!valid.ok()) return absl::InvalidArgumentError(absl::StrCat("key ", Quote(key), ": ", valid.message()));
  SL_RETURN_IF_ERROR(CheckNewKey(key));
  Pending p;
  p.key = key;
  p.is_value = true;
  p.value = std::move(value);
  pending_.push_back(std::move(p));
  return absl::OkStatus();
}

absl::Status OfflineDcpWriter::Commit(DcpWriteStats* stats) {
  if (committed_) return absl::FailedPreconditionError("OfflineDcpWriter::Commit called twice");
  committed_ = true;
  if (world_size_ < 1 || world_size_ > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", world_size_, " is not in [1, 65536]"));
  }
  DcpWriteStats local;
  std::vector<std::string> written;
  absl::Status s = NoThrow([&] { return CommitUnsafe(stats != nullptr ? stats : &local, &written); });
  if (!s.ok()) {
    for (const std::string& path : written) storage_->Remove(path).IgnoreError();
  }
  pending_.clear();
  return s;
}

absl::Status OfflineDcpWriter::CommitUnsafe(DcpWriteStats* stats, std::vector<std::string>* written) {
  Storage& storage = *storage_;
  SL_RETURN_IF_ERROR(storage.MakeDirectories(dir_));
  if (storage.Exists(JoinPath(dir_, kIndexFileName))) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", dir_, "' holds a shardlight checkpoint (", kIndexFileName,
        "), which loads would read instead of the DCP one; write the DCP checkpoint to another directory"));
  }
  const bool exclusive = storage.RenameIsCopy(dir_) && !storage.Exists(JoinPath(dir_, kDcpMetadataFileName));
  const std::string generation = NewGeneration();
  std::vector<DcpEntry> entries(pending_.size());
  for (size_t i = 0; i < pending_.size(); ++i) {
    entries[i].key = pending_[i].key;
    entries[i].is_value = pending_[i].is_value;
    entries[i].dtype = pending_[i].dtype;
    entries[i].size = pending_[i].sizes;
  }
  std::set<std::string> files;
  for (int rank = 0; rank < world_size_; ++rank) {
    const std::string name = absl::StrCat("__", rank, "_", generation, ".distcp");
    const std::string path = JoinPath(dir_, name);
    SL_ASSIGN_OR_RETURN(File file, File::CreateNew(storage, path));
    written->push_back(path);
    files.insert(name);
    int64_t pos = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
      const Pending& p = pending_[i];
      if (p.is_value) continue;
      int64_t numel = 1;
      for (int64_t n : p.sizes) numel *= n;
      // Rank r's box: the whole tensor on rank 0 (unchunked or without
      // elements), else torch.chunk's r-th piece along p.dim.
      std::vector<int64_t> offsets(p.sizes.size(), 0), sizes = p.sizes;
      if (p.dim < 0 || numel == 0) {
        if (rank != 0) continue;
      } else {
        const int64_t n = p.sizes[static_cast<size_t>(p.dim)];
        const int64_t chunk = (n + world_size_ - 1) / world_size_;
        const int64_t begin = std::min<int64_t>(n, chunk * rank);
        const int64_t end = std::min<int64_t>(n, begin + chunk);
        if (end <= begin) continue;
        offsets[static_cast<size_t>(p.dim)] = begin;
        sizes[static_cast<size_t>(p.dim)] = end - begin;
      }
      at::Tensor tile = at::empty(sizes, at::TensorOptions().dtype(p.dtype));
      if (tile.numel() > 0) {
        absl::Status filled = p.fill(offsets, tile);
        if (!filled.ok()) return absl::Status(filled.code(), absl::StrCat("key ", Quote(p.key), ": ", filled.message()));
      }
      DcpChunk c{offsets, sizes, {name, pos, 0}};
      SL_ASSIGN_OR_RETURN(c.item.length, AppendTensorPayload(file, pos, p.key, tile));
      pos += c.item.length;
      entries[i].chunks.push_back(std::move(c));
    }
    for (size_t i = 0; rank == 0 && i < pending_.size(); ++i) {
      if (!pending_[i].is_value) continue;
      entries[i].value = {name, pos, 0};
      SL_ASSIGN_OR_RETURN(entries[i].value.length, AppendValuePayload(file, pos, pending_[i].value));
      pos += entries[i].value.length;
    }
    SL_RETURN_IF_ERROR(file.Sync());
    SL_RETURN_IF_ERROR(file.Close());
    stats->bytes_written += pos;
    ++stats->files;
  }
  SL_RETURN_IF_ERROR(storage.SyncDirectory(dir_));
  SL_ASSIGN_OR_RETURN(const std::string pickle, DcpMetadataPickle(entries));
  bool committed = false;
  absl::Status commit = CommitDcpMetadata(storage, dir_, pickle, exclusive, &committed);
  if (committed) written->clear();  // the files are the checkpoint's now
  SL_RETURN_IF_ERROR(commit);
  SL_ASSIGN_OR_RETURN(stats->removed, RemoveStaleDcpFiles(storage, dir_, files));
  return absl::OkStatus();
}

}  // namespace shardlight::sharded::checkpoint::dcp
