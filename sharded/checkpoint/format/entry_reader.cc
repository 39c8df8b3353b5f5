#include "sharded/checkpoint/format/entry_reader.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/format/crc32c.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/checkpoint/format/row_major_tiles.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {
namespace {

// Bytes read straight into a destination per read call: small enough that
// the checksum pass that follows finds them still in the core's L2 cache
// (the read's copy brought them there), so the check costs the checksum's
// arithmetic, not a second trip to memory.
constexpr int64_t kDirectChunkBytes = int64_t{256} << 10;

int64_t Product(absl::Span<const int64_t> v) {
  int64_t n = 1;
  for (int64_t x : v) n *= x;
  return n;
}

int64_t EntryBytes(const EntrySource& src) {
  return Product(src.sizes) * static_cast<int64_t>(c10::elementSize(src.dtype));
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string Where(const EntrySource& src) {
  const std::string entry = src.entry_shard < 0 ? std::string(src.entry_name)
                                                : absl::StrCat(src.entry_name, "/shard-", src.entry_shard);
  return absl::StrCat("data file ", Quote(src.file_name), ", entry ", Quote(entry));
}

// An entry stored over permuted dims, seen as the row-major entry it is:
// every box and destination in its stored dim order.
struct Permuted {
  Permuted(const EntrySource& src, absl::Span<const int64_t> region_offsets,
           absl::Span<const int64_t> region_sizes)
      : source(src), source_order(src.dim_order.begin(), src.dim_order.end()) {
    for (int64_t d : src.dim_order) {
      offsets.push_back(src.offsets[d]);
      sizes.push_back(src.sizes[d]);
      region_at.push_back(region_offsets[d]);
      region_size.push_back(region_sizes[d]);
    }
    source.offsets = offsets;
    source.sizes = sizes;
    source.dim_order = {};
  }
  std::vector<int64_t> Order(absl::Span<const int64_t> v) const {
    std::vector<int64_t> out;
    for (int64_t d : source_order) out.push_back(v[d]);
    return out;
  }
  EntrySource source;
  std::vector<int64_t> source_order;
  std::vector<int64_t> offsets, sizes, region_at, region_size;
};

// Whether dim_order is a permutation of the entry's dims.
bool IsPermutation(const EntrySource& src) {
  std::vector<bool> seen(src.sizes.size(), false);
  if (src.dim_order.size() != src.sizes.size()) return false;
  for (int64_t d : src.dim_order) {
    if (d < 0 || d >= static_cast<int64_t>(seen.size()) || seen[d]) return false;
    seen[d] = true;
  }
  return true;
}

}  // namespace

EntryReader::EntryReader(int64_t buffer_bytes, ReadStats* stats) : requested_bytes_(buffer_bytes), stats_(stats) {}

void EntryReader::Allocate(int64_t block_bytes) {
  int64_t want = std::max(requested_bytes_, 4 * block_bytes);
  want -= want % block_bytes;
  if (buffer_ && capacity_ >= 4 * block_bytes && capacity_ % block_bytes == 0) return;
  buffer_.reset(new char[static_cast<size_t>(want)]);  // uninitialised: pages are touched only when used
  capacity_ = want;
  cached_file_ = nullptr;
}

int64_t EntryReader::Budget(const EntrySource& src) {
  Allocate(src.block_bytes);
  return capacity_ - 2 * src.block_bytes;
}

absl::Status EntryReader::CheckBlock(const EntrySource& src, int64_t block, const char* data, int64_t n) const {
  const bool checked = src.block_crcs != nullptr;
  if (checked && Crc32c(data, static_cast<size_t>(n)) != src.block_crcs[block]) {
    return absl::DataLossError(absl::StrCat(Where(src), ": checksum mismatch in block ", block, " (entry bytes [",
                                            block * src.block_bytes, ", ", block * src.block_bytes + n,
                                            ")): the file is corrupt"));
  }
  // FORMAT.md: a BOOL is one byte, 0 or 1. Any other byte would load as a
  // bool whose value depends on the compiler (the checksum cannot tell).
  if (src.dtype == c10::ScalarType::Bool) {
    for (int64_t i = 0; i < n; ++i) {
      const unsigned char b = static_cast<unsigned char>(data[i]);
      if (b > 1) {
        return absl::InvalidArgumentError(absl::StrCat(Where(src), ": BOOL byte ", block * src.block_bytes + i,
                                                       " of the entry is ", static_cast<int>(b), ", not 0 or 1"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<char*> EntryReader::LoadBlocks(const EntrySource& src, int64_t first, int64_t last) {
  const int64_t block = src.block_bytes;
  const int64_t length = EntryBytes(src);
  char* buf = buffer_.get();
  const bool same = cached_file_ == src.file && cached_begin_ == src.begin;
  if (same && first >= cached_first_ && last <= cached_last_) return buf + (first - cached_first_) * block;
  int64_t read_from = first;
  if (same && first >= cached_first_ && first < cached_last_) {
    // Keep the overlap: consecutive tiles share their boundary block. Only
    // full blocks move (a partial block is the entry's last, never followed).
    std::memmove(buf, buf + (first - cached_first_) * block, static_cast<size_t>((cached_last_ - first) * block));
    read_from = cached_last_;
  }
  cached_file_ = nullptr;  // until the new contents are checked
  const int64_t byte_begin = read_from * block;
  const int64_t byte_end = std::min(last * block, length);
  if (byte_end > byte_begin) {
    absl::Status s = src.file->ReadAt(buf + (read_from - first) * block, byte_end - byte_begin, src.begin + byte_begin);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(Where(src), ": ", s.message()));
    if (stats_) stats_->bytes_read += byte_end - byte_begin;
    for (int64_t k = read_from; k < last; ++k) {
      SL_RETURN_IF_ERROR(CheckBlock(src, k, buf + (k - first) * block, std::min(block, length - k * block)));
    }
  }
  cached_file_ = src.file;
  cached_begin_ = src.begin;
  cached_first_ = first;
  cached_last_ = last;
  return buf;
}

absl::Status EntryReader::ThroughBuffer(const EntrySource& src, int64_t begin, int64_t end, char* dst) {
  Allocate(src.block_bytes);
  const int64_t block = src.block_bytes;
  const int64_t max_blocks = capacity_ / block;
  int64_t pos = begin;
  while (pos < end) {
    const int64_t first = pos / block;
    const int64_t last = std::min(CeilDiv(end, block), first + max_blocks);
    SL_ASSIGN_OR_RETURN(auto base, LoadBlocks(src, first, last));
    const int64_t n = std::min(end, last * block) - pos;
    if (dst != nullptr) std::memcpy(dst + (pos - begin), base + (pos - first * block), static_cast<size_t>(n));
    pos += n;
  }
  return absl::OkStatus();
}

absl::Status EntryReader::ReadRun(const EntrySource& src, int64_t begin, int64_t end, char* dst) {
  const int64_t block = src.block_bytes;
  const int64_t length = EntryBytes(src);
  // Blocks wholly inside [begin, end); the entry's short last block counts
  // when the run reaches the end of the entry.
  const int64_t inner_first = CeilDiv(begin, block);
  const int64_t inner_last = end == length ? CeilDiv(length, block) : end / block;
  if (dst == nullptr || inner_first >= inner_last) return ThroughBuffer(src, begin, end, dst);
  const int64_t middle_begin = inner_first * block;
  const int64_t middle_end = std::min(inner_last * block, length);
  if (begin < middle_begin) {
    SL_RETURN_IF_ERROR(ThroughBuffer(src, begin, middle_begin, dst));
  }
  const int64_t chunk = std::max(block, kDirectChunkBytes - kDirectChunkBytes % block);
  for (int64_t pos = middle_begin; pos < middle_end; pos += chunk) {
    const int64_t n = std::min(chunk, middle_end - pos);
    char* out = dst + (pos - begin);
    absl::Status s = src.file->ReadAt(out, n, src.begin + pos);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(Where(src), ": ", s.message()));
    if (stats_) stats_->bytes_read += n;
    for (int64_t k = pos / block; k * block < pos + n; ++k) {
      SL_RETURN_IF_ERROR(CheckBlock(src, k, out + (k * block - pos), std::min(block, length - k * block)));
    }
  }
  if (middle_end < end) return ThroughBuffer(src, middle_end, end, dst + (middle_end - begin));
  return absl::OkStatus();
}

absl::Status EntryReader::Walk(const EntrySource& src, const std::vector<int64_t>& strides, std::vector<int64_t> rel,
                               std::vector<int64_t> sizes, const at::Tensor& view, bool verify_only) {
  const int64_t n = Product(sizes);
  if (n == 0) return absl::OkStatus();
  const int64_t elem = static_cast<int64_t>(c10::elementSize(src.dtype));
  int64_t first = 0, last = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    first += rel[d] * strides[d];
    last += (rel[d] + sizes[d] - 1) * strides[d];
  }
  const int64_t span = last - first + 1;
  // A box is one run of the row-major order exactly when its span is its size.
  if (span == n) {
    if (verify_only) return ReadRun(src, first * elem, (first + n) * elem, nullptr);
    if (view.is_cpu() && view.is_contiguous()) {
      if (stats_) stats_->bytes_copied += n * elem;
      return ReadRun(src, first * elem, (first + n) * elem, static_cast<char*>(view.data_ptr()));
    }
  }
  const int64_t budget = Budget(src) / elem;
  if (span <= budget) {
    const int64_t block = src.block_bytes;
    const int64_t first_block = first * elem / block;
    SL_ASSIGN_OR_RETURN(auto base, LoadBlocks(src, first_block, CeilDiv((last + 1) * elem, block)));
    if (!verify_only) {
      char* p = base + (first * elem - first_block * block);
      at::Tensor tile = at::from_blob(p, sizes, strides, at::TensorOptions().dtype(src.dtype));
      view.copy_(tile);
      if (stats_) stats_->bytes_copied += n * elem;
    }
    return absl::OkStatus();
  }
  // Too wide for the buffer: split the outermost dim that has extent.
  size_t j = 0;
  while (sizes[j] == 1) ++j;
  int64_t slice_span = 1;
  for (size_t d = j + 1; d < sizes.size(); ++d) slice_span += (sizes[d] - 1) * strides[d];
  const int64_t step = slice_span <= budget ? 1 + (budget - slice_span) / strides[j] : 1;
  const int64_t extent = sizes[j];
  const int64_t start = rel[j];
  for (int64_t r = 0; r < extent; r += step) {
    const int64_t count = std::min(step, extent - r);
    rel[j] = start + r;
    sizes[j] = count;
    at::Tensor sub = verify_only ? view : view.narrow(static_cast<int64_t>(j), r, count);
    SL_RETURN_IF_ERROR(Walk(src, strides, rel, sizes, sub, verify_only));
  }
  return absl::OkStatus();
}

absl::Status EntryReader::Copy(const EntrySource& src, const at::Tensor& dst, absl::Span<const int64_t> dst_offsets,
                               absl::Span<const int64_t> region_offsets, absl::Span<const int64_t> region_sizes) {
  if (dst.scalar_type() != src.dtype) {
    return absl::InternalError(absl::StrCat(Where(src), ": destination dtype ", c10::toString(dst.scalar_type()),
                                            " differs from the entry's ", c10::toString(src.dtype)));
  }
  const size_t dims = src.sizes.size();
  if (region_offsets.size() != dims || region_sizes.size() != dims || dst_offsets.size() != dims ||
      static_cast<size_t>(dst.dim()) != dims) {
    return absl::InternalError(absl::StrCat(Where(src), ": region has the wrong number of dims"));
  }
  if (!src.dim_order.empty()) {
    if (!IsPermutation(src)) return absl::InternalError(absl::StrCat(Where(src), ": dim_order is not a permutation"));
    const Permuted p(src, region_offsets, region_sizes);
    return Copy(p.source, dst.permute(c10::IntArrayRef(p.source_order)), p.Order(dst_offsets), p.region_at,
                p.region_size);
  }
  const c10::IntArrayRef dst_sizes = dst.sizes();
  for (size_t d = 0; d < dims; ++d) {
    const int64_t rel = region_offsets[d] - src.offsets[d];
    const int64_t in_dst = region_offsets[d] - dst_offsets[d];
    if (rel < 0 || rel + region_sizes[d] > src.sizes[d] || in_dst < 0 || in_dst + region_sizes[d] > dst_sizes[d]) {
      return absl::InternalError(absl::StrCat(Where(src), ": region lies outside the entry or the destination"));
    }
  }
  // The common case, a run of the entry into a run of a contiguous CPU
  // destination, is plain pointer arithmetic: no tensor op, no allocation.
  if (dst.is_cpu() && dst.is_contiguous()) {
    const int64_t n = Product(region_sizes);
    if (n == 0) return absl::OkStatus();
    const c10::IntArrayRef dst_strides = dst.strides();
    int64_t src_first = 0, src_last = 0, dst_first = 0, dst_last = 0, src_stride = 1;
    for (size_t d = dims; d-- > 0;) {
      const int64_t rel = region_offsets[d] - src.offsets[d];
      const int64_t in_dst = region_offsets[d] - dst_offsets[d];
      src_first += rel * src_stride;
      src_last += (rel + region_sizes[d] - 1) * src_stride;
      dst_first += in_dst * dst_strides[d];
      dst_last += (in_dst + region_sizes[d] - 1) * dst_strides[d];
      src_stride *= std::max<int64_t>(src.sizes[d], 1);
    }
    if (src_last - src_first + 1 == n && dst_last - dst_first + 1 == n) {
      const int64_t elem = static_cast<int64_t>(c10::elementSize(src.dtype));
      if (stats_) stats_->bytes_copied += n * elem;
      return ReadRun(src, src_first * elem, (src_first + n) * elem, static_cast<char*>(dst.data_ptr()) + dst_first * elem);
    }
  }
  std::vector<int64_t> rel(dims);
  at::Tensor view = dst;
  for (size_t d = 0; d < dims; ++d) {
    rel[d] = region_offsets[d] - src.offsets[d];
    view = view.narrow(static_cast<int64_t>(d), region_offsets[d] - dst_offsets[d], region_sizes[d]);
  }
  at::NoGradGuard no_grad;  // filling parameters in place is not an autograd op
  return Walk(src, RowMajorStrides({src.sizes.begin(), src.sizes.end()}), rel,
              {region_sizes.begin(), region_sizes.end()}, view,
              /*verify_only=*/false);
}

ByteRange EntryReader::SpanOf(const EntrySource& src, absl::Span<const int64_t> region_offsets,
                              absl::Span<const int64_t> region_sizes) {
  const size_t dims = src.sizes.size();
  const bool permuted = !src.dim_order.empty() && IsPermutation(src);
  if (region_offsets.size() != dims || region_sizes.size() != dims || Product(region_sizes) == 0) {
    return {src.begin, src.begin};
  }
  // Stored order, innermost dim last.
  int64_t first = 0, last = 0, stride = 1;
  for (size_t j = dims; j-- > 0;) {
    const size_t d = permuted ? static_cast<size_t>(src.dim_order[j]) : j;
    const int64_t rel = region_offsets[d] - src.offsets[d];
    first += rel * stride;
    last += (rel + region_sizes[d] - 1) * stride;
    stride *= std::max<int64_t>(src.sizes[d], 1);
  }
  const int64_t elem = static_cast<int64_t>(c10::elementSize(src.dtype));
  const int64_t length = EntryBytes(src);
  const int64_t block = src.block_bytes > 0 ? src.block_bytes : 1;
  const int64_t begin = first * elem / block * block;
  const int64_t end = std::min(CeilDiv((last + 1) * elem, block) * block, length);
  return {src.begin + begin, src.begin + std::max(begin, end)};
}

char* EntryReader::WholeEntryDestination(const EntrySource& src, const at::Tensor& dst,
                                         absl::Span<const int64_t> dst_offsets,
                                         absl::Span<const int64_t> region_offsets,
                                         absl::Span<const int64_t> region_sizes) {
  const size_t dims = src.sizes.size();
  if (!src.dim_order.empty()) return nullptr;  // not one run of a row-major destination
  if (dst.scalar_type() != src.dtype || !dst.is_cpu() || !dst.is_contiguous() || static_cast<size_t>(dst.dim()) != dims ||
      region_offsets.size() != dims || region_sizes.size() != dims || dst_offsets.size() != dims) {
    return nullptr;
  }
  const c10::IntArrayRef dst_sizes = dst.sizes();
  const c10::IntArrayRef dst_strides = dst.strides();
  int64_t first = 0, last = 0, n = 1;
  for (size_t d = 0; d < dims; ++d) {
    const int64_t in_dst = region_offsets[d] - dst_offsets[d];
    if (region_offsets[d] != src.offsets[d] || region_sizes[d] != src.sizes[d] || in_dst < 0 ||
        in_dst + region_sizes[d] > dst_sizes[d]) {
      return nullptr;
    }
    first += in_dst * dst_strides[d];
    last += (in_dst + region_sizes[d] - 1) * dst_strides[d];
    n *= region_sizes[d];
  }
  if (n == 0 || last - first + 1 != n) return nullptr;
  return static_cast<char*>(dst.data_ptr()) + first * static_cast<int64_t>(c10::elementSize(src.dtype));
}

absl::Status EntryReader::CopyAdjacent(absl::Span<const EntryRun> runs, size_t* failed) {
  size_t i = 0;
  while (i < runs.size()) {
    const EntrySource& head = runs[i].src;
    Allocate(head.block_bytes);
    const int64_t limit = std::min(capacity_, kCoalescedReadBytes);
    // Entries i .. j-1 in one read.
    const int64_t start = head.begin;
    int64_t end = start;
    size_t j = i;
    while (j < runs.size() && runs[j].src.file == head.file && runs[j].src.begin == end &&
           runs[j].src.block_bytes == head.block_bytes && end + EntryBytes(runs[j].src) - start <= limit) {
      end += EntryBytes(runs[j].src);
      ++j;
    }
    if (j == i) {  // too large for the buffer, or not adjacent: on its own
      *failed = i;
      const int64_t length = EntryBytes(head);
      if (stats_) stats_->bytes_copied += length;
      SL_RETURN_IF_ERROR(ReadRun(head, 0, length, runs[i].dst));
      ++i;
      continue;
    }
    cached_file_ = nullptr;  // the buffer no longer holds cached blocks
    char* buf = buffer_.get();
    absl::Status s = head.file->ReadAt(buf, end - start, start);
    if (!s.ok()) {
      *failed = i;
      return absl::Status(s.code(), absl::StrCat(Where(head), ": ", s.message()));
    }
    if (stats_) stats_->bytes_read += end - start;
    for (size_t k = i; k < j; ++k) {
      const EntrySource& src = runs[k].src;
      const char* bytes = buf + (src.begin - start);
      const int64_t length = EntryBytes(src);
      for (int64_t b = 0; b * src.block_bytes < length; ++b) {
        s = CheckBlock(src, b, bytes + b * src.block_bytes, std::min(src.block_bytes, length - b * src.block_bytes));
        if (!s.ok()) {
          *failed = k;
          return s;
        }
      }
      std::memcpy(runs[k].dst, bytes, static_cast<size_t>(length));
      if (stats_) stats_->bytes_copied += length;
    }
    i = j;
  }
  return absl::OkStatus();
}

absl::Status EntryReader::Verify(const EntrySource& src, absl::Span<const int64_t> region_offsets,
                                 absl::Span<const int64_t> region_sizes) {
  const size_t dims = src.sizes.size();
  if (region_offsets.size() != dims || region_sizes.size() != dims) {
    return absl::InternalError(absl::StrCat(Where(src), ": region has the wrong number of dims"));
  }
  if (!src.dim_order.empty()) {
    if (!IsPermutation(src)) return absl::InternalError(absl::StrCat(Where(src), ": dim_order is not a permutation"));
    const Permuted p(src, region_offsets, region_sizes);
    return Verify(p.source, p.region_at, p.region_size);
  }
  std::vector<int64_t> rel(dims);
  for (size_t d = 0; d < dims; ++d) {
    rel[d] = region_offsets[d] - src.offsets[d];
    if (rel[d] < 0 || rel[d] + region_sizes[d] > src.sizes[d]) {
      return absl::InternalError(absl::StrCat(Where(src), ": region lies outside the entry"));
    }
  }
  return Walk(src, RowMajorStrides({src.sizes.begin(), src.sizes.end()}), rel,
              {region_sizes.begin(), region_sizes.end()}, at::Tensor(),
              /*verify_only=*/true);
}

}  // namespace shardlight::sharded::checkpoint
