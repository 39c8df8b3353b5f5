#include "sharded/checkpoint/format/data_file.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/format/block_checksums.h"
#include "sharded/checkpoint/format/dtype_names.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "sharded/no_throw.h"
#include "sharded/checkpoint/storage/storage.h"
#include "sharded/checkpoint/format/row_major_tiles.h"
#include "sharded/checkpoint/format/safetensors.h"
#include "sharded/status_macros.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint data is little-endian raw bytes; a big-endian writer would need byte swapping"
#endif

namespace shardlight::sharded::checkpoint {
namespace {

// Writes from the tensor's own memory go out in pieces of this size: small
// enough that the write finds the bytes the checksum just read in cache.
constexpr int64_t kDirectChunkBytes = int64_t{1} << 20;

// Entries up to this size are gathered with their neighbours into one write
// of at most kCoalescedWriteBytes: a file of many small tensors costs a write
// call per MiB, not per entry.
constexpr int64_t kCoalescedEntryBytes = int64_t{256} << 10;
constexpr int64_t kCoalescedWriteBytes = int64_t{1} << 20;

// Bytes of consecutive small entries waiting to be written as one.
class PendingWrite {
 public:
  explicit PendingWrite(File& file) : file_(file) {}
  absl::Status Add(const char* p, int64_t n, int64_t offset) {
    if (!bytes_.empty() && (offset != start_ + static_cast<int64_t>(bytes_.size()) ||
                            static_cast<int64_t>(bytes_.size()) + n > kCoalescedWriteBytes)) {
      SL_RETURN_IF_ERROR(Flush());
    }
    if (bytes_.empty()) {
      start_ = offset;
      bytes_.reserve(static_cast<size_t>(kCoalescedWriteBytes));
    }
    bytes_.append(p, static_cast<size_t>(n));
    return absl::OkStatus();
  }
  absl::Status Flush() {
    if (bytes_.empty()) return absl::OkStatus();
    absl::Status s = file_.WriteAt(bytes_.data(), static_cast<int64_t>(bytes_.size()), start_);
    bytes_.clear();
    return s;
  }

 private:
  File& file_;
  std::string bytes_;
  int64_t start_ = 0;
};

// Streams an entry of `sizes` row-major to `file` at `offset`, feeding
// `crcs`: tile by tile through the buffer, each tile filled by `fill`.
absl::Status WriteTiles(File& file, c10::ScalarType dtype, const std::vector<int64_t>& sizes, const RegionFill& fill,
                        int64_t offset, BlockChecksums& crcs, int64_t buffer_bytes, std::unique_ptr<char[]>& buffer) {
  const int64_t elem = static_cast<int64_t>(c10::elementSize(dtype));
  if (!buffer) buffer.reset(new char[static_cast<size_t>(buffer_bytes)]);
  at::NoGradGuard no_grad;
  int64_t pos = offset;
  return ForEachRowMajorTile(sizes, buffer_bytes / elem,
                             [&](const std::vector<int64_t>& off, const std::vector<int64_t>& size) -> absl::Status {
                               at::Tensor staged = at::from_blob(buffer.get(), size, at::TensorOptions().dtype(dtype));
                               SL_RETURN_IF_ERROR(fill(off, staged));
                               const int64_t n = staged.numel() * elem;
                               crcs.Update(buffer.get(), n);
                               absl::Status s = file.WriteAt(buffer.get(), n, pos);
                               pos += n;
                               return s;
                             });
}

// Streams `entry` row-major to `file` at `offset`, feeding `crcs`.
absl::Status WriteEntry(File& file, const EntryToWrite& entry, int64_t offset, BlockChecksums& crcs,
                        int64_t buffer_bytes, std::unique_ptr<char[]>& buffer) {
  const at::Tensor& tensor = entry.tensor;
  if (!tensor.defined()) return WriteTiles(file, entry.dtype, entry.sizes, entry.fill, offset, crcs, buffer_bytes, buffer);
  const int64_t elem = static_cast<int64_t>(tensor.element_size());
  if (tensor.is_cpu() && tensor.is_contiguous()) {
    const char* p = static_cast<const char*>(tensor.data_ptr());
    const int64_t total = tensor.numel() * elem;
    for (int64_t pos = 0; pos < total; pos += kDirectChunkBytes) {
      const int64_t n = std::min(kDirectChunkBytes, total - pos);
      crcs.Update(p + pos, n);
      SL_RETURN_IF_ERROR(file.WriteAt(p + pos, n, offset + pos));
    }
    return absl::OkStatus();
  }
  // Non-contiguous or on a device: row-major tiles copied into the buffer.
  auto copy_tile = [&](const std::vector<int64_t>& off, const at::Tensor& tile) {
    at::Tensor src = tensor;
    for (size_t d = 0; d < off.size(); ++d) src = src.narrow(static_cast<int64_t>(d), off[d], tile.size(static_cast<int64_t>(d)));
    tile.copy_(src);
    return absl::OkStatus();
  };
  return WriteTiles(file, tensor.scalar_type(), tensor.sizes().vec(), copy_tile, offset, crcs, buffer_bytes, buffer);
}

// Streams entry `index` (`total` bytes) from `source` to `file` at `offset`;
// a small entry's pieces join `pending` (copied, so each piece is released at
// once), as the direct path coalesces small tensors.
absl::Status WriteFromSource(File& file, EntryByteSource& source, size_t index, int64_t total, int64_t offset,
                             BlockChecksums& crcs, PendingWrite& pending) {
  const bool coalesce = total <= kCoalescedEntryBytes;
  if (!coalesce) SL_RETURN_IF_ERROR(pending.Flush());
  for (int64_t pos = 0; pos < total;) {
    SL_ASSIGN_OR_RETURN(const EntryByteSource::Piece piece, source.Next(index));
    if (piece.size <= 0 || piece.size > total - pos) {
      return absl::InternalError(absl::StrCat("entry ", index, ": a staged piece of ", piece.size, " bytes at byte ",
                                              pos, " of ", total));
    }
    crcs.Update(piece.data, piece.size);
    const absl::Status written = coalesce ? pending.Add(piece.data, piece.size, offset + pos)
                                          : file.WriteAt(piece.data, piece.size, offset + pos);
    source.Release();
    SL_RETURN_IF_ERROR(written);
    pos += piece.size;
  }
  return absl::OkStatus();
}

absl::StatusOr<WrittenFile> WriteAll(File& file, const std::vector<EntryToWrite>& entries,
                                     const DataFileOptions& options) {
  std::vector<SafetensorsEntry> layout;
  layout.reserve(entries.size());
  for (const EntryToWrite& e : entries) {
    const c10::ScalarType type = e.tensor.defined() ? e.tensor.scalar_type() : e.dtype;
    const std::string dtype = DtypeName(type);
    if (dtype.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("entry ", Quote(e.name), ": dtype ", c10::toString(type), " cannot be checkpointed"));
    }
    if (!e.tensor.defined() && !e.fill) {
      return absl::InvalidArgumentError(absl::StrCat("entry ", Quote(e.name), ": neither a tensor nor a fill"));
    }
    layout.push_back({e.name, dtype, e.tensor.defined() ? e.tensor.sizes().vec() : e.sizes, 0, 0});
  }
  SL_ASSIGN_OR_RETURN(auto data_bytes, AssignDataOffsets(layout));
  const std::string header = EncodeSafetensorsHeader(layout, options.metadata);
  SL_RETURN_IF_ERROR(file.WriteAt(header.data(), static_cast<int64_t>(header.size()), 0));
  WrittenFile out;
  out.header_bytes = static_cast<int64_t>(header.size()) - 8;
  const int64_t data_start = static_cast<int64_t>(header.size());
  std::unique_ptr<char[]> buffer;
  const int64_t buffer_bytes = std::max<int64_t>(options.buffer_bytes, 4096);
  PendingWrite pending(file);
  for (size_t i = 0; i < entries.size(); ++i) {
    BlockChecksums crcs(options.block_bytes);
    const at::Tensor& t = entries[i].tensor;
    const int64_t length = layout[i].end - layout[i].begin;
    if (options.source == nullptr && t.defined() && t.is_cpu() && t.is_contiguous() && length <= kCoalescedEntryBytes) {
      const char* p = static_cast<const char*>(t.data_ptr());
      crcs.Update(p, length);
      SL_RETURN_IF_ERROR(pending.Add(p, length, data_start + layout[i].begin));
    } else if (options.source != nullptr) {
      SL_RETURN_IF_ERROR(WriteFromSource(file, *options.source, i, layout[i].end - layout[i].begin,
                                         data_start + layout[i].begin, crcs, pending));
    } else {
      SL_RETURN_IF_ERROR(pending.Flush());
      SL_RETURN_IF_ERROR(WriteEntry(file, entries[i], data_start + layout[i].begin, crcs, buffer_bytes, buffer));
    }
    out.entries.push_back({entries[i].name, data_start + layout[i].begin, data_start + layout[i].end, crcs.Finish()});
  }
  SL_RETURN_IF_ERROR(pending.Flush());
  out.bytes = data_start + data_bytes;
  SL_RETURN_IF_ERROR(file.Sync());
  SL_RETURN_IF_ERROR(file.Close());
  return out;
}

}  // namespace

absl::StatusOr<WrittenFile> WriteDataFile(const std::string& path, const std::vector<EntryToWrite>& entries,
                                          const DataFileOptions& options) {
  Storage& storage = StorageOrDefault(options.storage);
  SL_ASSIGN_OR_RETURN(File file, File::CreateNew(storage, path));
  // An exception (a failing tensor copy) is an error like any other: the
  // partial file is removed either way.
  auto written = NoThrow([&] { return WriteAll(file, entries, options); });
  if (!written.ok()) {
    file.Close().IgnoreError();
    storage.Remove(path).IgnoreError();
  }
  return written;
}

}  // namespace shardlight::sharded::checkpoint
