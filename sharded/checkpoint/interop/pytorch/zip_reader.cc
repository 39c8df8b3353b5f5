// ZipReader: end record -> (zip64 end record) -> central directory, checked
// whole; records read or inflated straight into their destination.
#include "sharded/checkpoint/interop/pytorch/zip_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint::pytorch {
namespace {

constexpr uint32_t kEndSig = 0x06054b50, kEnd64Sig = 0x06064b50, kLocatorSig = 0x07064b50;
constexpr uint32_t kCentralSig = 0x02014b50, kLocalSig = 0x04034b50;
constexpr uint64_t kEndSize = 22, kLocatorSize = 20, kEnd64Size = 56, kCentralSize = 46, kLocalSize = 30;
constexpr uint64_t kMaxComment = 0xFFFF;
// Deflate's best case is 258 bytes from one bit-packed code (~1032:1); a
// record that declares more than this from its compressed size is corrupt.
constexpr uint64_t kMaxDeflateRatio = 1032;
constexpr uint64_t kStoredChunk = uint64_t{64} << 20;  // CRC-32 runs over each piece while it is hot

uint64_t Le(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

// a + b <= limit, without overflow.
bool Within(uint64_t a, uint64_t b, uint64_t limit) { return a <= limit && b <= limit - a; }

uint32_t Crc(uint32_t crc, const char* p, uint64_t n) {
  while (n > 0) {
    const uInt piece = static_cast<uInt>(std::min<uint64_t>(n, uint64_t{1} << 30));
    crc = static_cast<uint32_t>(crc32(crc, reinterpret_cast<const Bytef*>(p), piece));
    p += piece;
    n -= piece;
  }
  return crc;
}

}  // namespace

absl::Status ZipReader::Bad(const std::string& what) const {
  return absl::InvalidArgumentError(absl::StrCat("'", name_, "': ", what));
}

absl::Status ZipReader::BadRecord(const ZipRecord& r, const std::string& what) const {
  return Bad(absl::StrCat("record ", Quote(r.name), " ", what));
}

absl::StatusOr<ZipReader> ZipReader::Open(File file, std::string name, bool check_crc) {
  ZipReader z;
  z.check_crc_ = check_crc;
  z.owned_ = std::make_unique<File>(std::move(file));
  z.source_ = z.owned_.get();
  z.name_ = std::move(name);
  SL_ASSIGN_OR_RETURN(const int64_t signed_size, z.source_->Size());
  z.size_ = static_cast<uint64_t>(signed_size);
  SL_RETURN_IF_ERROR(z.Init());
  return z;
}

absl::StatusOr<ZipReader> ZipReader::OpenRange(const File& file, uint64_t begin, uint64_t length, std::string name,
                                               bool check_crc) {
  ZipReader z;
  z.check_crc_ = check_crc;
  z.source_ = &file;
  z.base_ = begin;
  z.size_ = length;
  z.name_ = std::move(name);
  SL_ASSIGN_OR_RETURN(const int64_t file_size, file.Size());
  if (!Within(begin, length, static_cast<uint64_t>(file_size))) {
    return absl::DataLossError(absl::StrCat("'", z.name_, "': bytes [", begin, ", +", length,
                                            ") are past the end of the file (", file_size, " bytes): truncated"));
  }
  SL_RETURN_IF_ERROR(z.Init());
  return z;
}

absl::Status ZipReader::Read(void* dst, uint64_t n, uint64_t at) const {
  if (!Within(at, n, size_)) return Bad(absl::StrCat("bytes [", at, ", +", n, ") lie outside the archive"));
  return source_->ReadAt(dst, static_cast<int64_t>(n), static_cast<int64_t>(base_ + at));
}

absl::StatusOr<uint64_t> ZipReader::StoredDataOffset(const ZipRecord& r) const {
  if (r.method != 0) return BadRecord(r, "is compressed: its bytes are not read in parts");
  SL_ASSIGN_OR_RETURN(const uint64_t data, DataOffset(r));
  return base_ + data;
}

absl::Status ZipReader::Init() {
  ZipReader& z = *this;
  const uint64_t size = size_;
  if (size < kEndSize) return z.Bad("too short to be a zip");
  // The end record is the last thing in the file but for a comment of up to 64 KiB.
  const uint64_t tail_size = std::min(size, kEndSize + kMaxComment);
  std::string tail(tail_size, '\0');
  SL_RETURN_IF_ERROR(z.Read(tail.data(), tail_size, size - tail_size));
  uint64_t at = tail_size - kEndSize + 1;
  bool found = false;
  while (at-- > 0) {
    if (Le(&tail[at], 4) == kEndSig && at + kEndSize + Le(&tail[at + 20], 2) <= tail_size) {
      found = true;
      break;
    }
  }
  if (!found) return z.Bad("no zip end record (not a zip, or truncated)");
  const char* e = &tail[at];
  const uint64_t end_offset = size - tail_size + at;
  uint64_t disk = Le(e + 4, 2), directory_disk = Le(e + 6, 2), disk_count = Le(e + 8, 2), count = Le(e + 10, 2);
  uint64_t directory_size = Le(e + 12, 4), directory_offset = Le(e + 16, 4);
  uint64_t directory_end = end_offset;
  // Zip64: a locator just before the end record points at the zip64 end record.
  if (end_offset >= kLocatorSize) {
    char loc[kLocatorSize];
    SL_RETURN_IF_ERROR(z.Read(loc, kLocatorSize, end_offset - kLocatorSize));
    if (Le(loc, 4) == kLocatorSig) {
      const uint64_t end64 = Le(loc + 8, 8);
      if (!Within(end64, kEnd64Size, end_offset - kLocatorSize)) return z.Bad("the zip64 end record lies outside the file");
      char r[kEnd64Size];
      SL_RETURN_IF_ERROR(z.Read(r, kEnd64Size, end64));
      if (Le(r, 4) != kEnd64Sig) return z.Bad("the zip64 locator points at no zip64 end record");
      disk = Le(r + 16, 4);
      directory_disk = Le(r + 20, 4);
      disk_count = Le(r + 24, 8);
      count = Le(r + 32, 8);
      directory_size = Le(r + 40, 8);
      directory_offset = Le(r + 48, 8);
      directory_end = end64;
    }
  }
  if (disk != 0 || directory_disk != 0 || disk_count != count) return z.Bad("a multi-disk zip is not supported");
  if (!Within(directory_offset, directory_size, directory_end)) {
    return z.Bad(absl::StrCat("the central directory (", directory_size, " bytes at ", directory_offset,
                              ") overruns the file (truncated?)"));
  }
  if (count > directory_size / kCentralSize) {
    return z.Bad(absl::StrCat("the end record declares ", count, " records, more than a ", directory_size,
                              "-byte directory holds"));
  }
  std::string directory(directory_size, '\0');
  SL_RETURN_IF_ERROR(z.Read(directory.data(), directory_size, directory_offset));
  z.directory_offset_ = directory_offset;
  return z.ParseDirectory(directory, count);
}

absl::Status ZipReader::ParseDirectory(const std::string& dir, uint64_t count) {
  records_.reserve(count);
  uint64_t pos = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (!Within(pos, kCentralSize, dir.size()) || Le(&dir[pos], 4) != kCentralSig) {
      return Bad(absl::StrCat("central directory entry ", i, " is corrupt"));
    }
    const char* c = &dir[pos];
    const uint64_t flags = Le(c + 8, 2), name_len = Le(c + 28, 2), extra_len = Le(c + 30, 2), comment_len = Le(c + 32, 2);
    ZipRecord r;
    r.method = static_cast<uint16_t>(Le(c + 10, 2));
    r.crc32 = static_cast<uint32_t>(Le(c + 16, 4));
    r.compressed_size = Le(c + 20, 4);
    r.size = Le(c + 24, 4);
    r.header_offset = Le(c + 42, 4);
    if (!Within(pos + kCentralSize, name_len + extra_len + comment_len, dir.size())) {
      return Bad(absl::StrCat("central directory entry ", i, " overruns the directory"));
    }
    r.name.assign(c + kCentralSize, name_len);
    // Zip64 extended information: the 8-byte values of the fields set to all ones, in this order.
    for (uint64_t x = 0; x + 4 <= extra_len;) {
      const char* f = c + kCentralSize + name_len + x;
      const uint64_t id = Le(f, 2), len = Le(f + 2, 2);
      if (x + 4 + len > extra_len) return BadRecord(r, "has a malformed extra field");
      if (id == 1) {
        uint64_t used = 0;
        for (uint64_t* v : {&r.size, &r.compressed_size, &r.header_offset}) {
          if (*v != 0xFFFFFFFFu) continue;
          if (used + 8 > len) return BadRecord(r, "has a short zip64 extra field");
          *v = Le(f + 4 + used, 8);
          used += 8;
        }
      }
      x += 4 + len;
    }
    pos += kCentralSize + name_len + extra_len + comment_len;
    if ((flags & 0x41) != 0) return BadRecord(r, "is encrypted");
    if (r.method != 0 && r.method != 8) {
      return BadRecord(r, absl::StrCat("uses compression method ", r.method, " (only stored and deflate are read)"));
    }
    if (r.method == 0 && r.size != r.compressed_size) {
      return BadRecord(r, absl::StrCat("is stored but declares ", r.size, " bytes and ", r.compressed_size, " compressed"));
    }
    if (r.method == 8 && r.size / kMaxDeflateRatio > r.compressed_size) {
      return BadRecord(r, absl::StrCat("declares ", r.size, " bytes from ", r.compressed_size,
                                       " compressed, more than deflate can produce (corrupt, or a zip bomb)"));
    }
    if (!Within(r.header_offset, kLocalSize + name_len, directory_offset_) ||
        !Within(r.header_offset + kLocalSize + name_len, r.compressed_size, directory_offset_)) {
      return BadRecord(r, "lies outside the file's data (truncated?)");
    }
    if (i == 0) {
      const size_t slash = r.name.find('/');
      if (slash == std::string::npos || slash == 0) return BadRecord(r, "is not in a top folder (not a torch.save file)");
      top_ = r.name.substr(0, slash + 1);
    }
    records_.push_back(std::move(r));
  }
  std::sort(records_.begin(), records_.end(), [](const ZipRecord& a, const ZipRecord& b) { return a.name < b.name; });
  for (size_t i = 1; i < records_.size(); ++i) {
    if (records_[i - 1].name == records_[i].name) return BadRecord(records_[i], "appears twice in the directory");
  }
  return absl::OkStatus();
}

const ZipRecord* ZipReader::Find(absl::string_view name) const {
  const std::string full = absl::StrCat(top_, name);
  auto it = std::lower_bound(records_.begin(), records_.end(), full,
                             [](const ZipRecord& r, const std::string& n) { return r.name < n; });
  return it != records_.end() && it->name == full ? &*it : nullptr;
}

absl::StatusOr<uint64_t> ZipReader::DataOffset(const ZipRecord& r) const {
  char h[kLocalSize];
  SL_RETURN_IF_ERROR(Read(h, kLocalSize, r.header_offset));
  if (Le(h, 4) != kLocalSig) return BadRecord(r, "has no local header where the directory points");
  const uint64_t data = r.header_offset + kLocalSize + Le(h + 26, 2) + Le(h + 28, 2);
  if (!Within(data, r.compressed_size, directory_offset_)) return BadRecord(r, "overruns the file's data (truncated?)");
  return data;
}

absl::Status ZipReader::ReadInto(const ZipRecord& r, void* dst, uint64_t size) const {
  if (r.size != size) {
    return BadRecord(r, absl::StrCat("declares ", r.size, " bytes in the zip directory, but ", size, " are expected"));
  }
  SL_ASSIGN_OR_RETURN(const uint64_t data, DataOffset(r));
  char* out = static_cast<char*>(dst);
  uint32_t crc = 0;
  if (r.method == 0) {
    for (uint64_t done = 0; done < size;) {
      const uint64_t n = std::min(size - done, kStoredChunk);
      SL_RETURN_IF_ERROR(Read(out + done, n, data + done));
      crc = Crc(crc, out + done, n);
      done += n;
    }
  } else {
    SL_RETURN_IF_ERROR(Inflate(r, data, out, size, &crc));
  }
  if (check_crc_ && crc != r.crc32) return BadRecord(r, "fails its CRC-32 check (corrupt)");
  return absl::OkStatus();
}

absl::Status ZipReader::Inflate(const ZipRecord& r, uint64_t data, char* dst, uint64_t size, uint32_t* crc) const {
  z_stream s;
  std::memset(&s, 0, sizeof(s));
  if (inflateInit2(&s, -MAX_WBITS) != Z_OK) return absl::InternalError("zlib: inflateInit2 failed");
  struct End {
    z_stream* s;
    ~End() { inflateEnd(s); }
  } end{&s};
  std::vector<char> in(std::min(r.compressed_size, kInputChunk) + 1);  // +1: never empty
  uint64_t read = 0, produced = 0;
  char spare;  // where a byte beyond the declared size would go
  while (true) {
    if (s.avail_in == 0 && read < r.compressed_size) {
      const uint64_t n = std::min<uint64_t>(r.compressed_size - read, in.size());
      SL_RETURN_IF_ERROR(Read(in.data(), n, data + read));
      read += n;
      s.next_in = reinterpret_cast<Bytef*>(in.data());
      s.avail_in = static_cast<uInt>(n);
    }
    const bool full = produced == size;
    char* const next = full ? &spare : dst + produced;
    s.next_out = reinterpret_cast<Bytef*>(next);
    s.avail_out = full ? 1 : static_cast<uInt>(std::min<uint64_t>(size - produced, uint64_t{1} << 30));
    const uInt had_in = s.avail_in, had_out = s.avail_out;
    const int rc = inflate(&s, Z_NO_FLUSH);
    const uint64_t got = had_out - s.avail_out;
    if (full && got > 0) return BadRecord(r, absl::StrCat("inflates to more than the ", size, " bytes it declares"));
    *crc = Crc(*crc, next, got);
    produced += got;
    if (rc == Z_STREAM_END) break;
    if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT) {
      return BadRecord(r, absl::StrCat("holds corrupt deflate data: ", s.msg != nullptr ? s.msg : "bad stream"));
    }
    if (rc == Z_MEM_ERROR) return absl::ResourceExhaustedError("zlib: out of memory");
    if (got == 0 && had_in == s.avail_in && (s.avail_in != 0 || read == r.compressed_size)) {  // no progress
      return BadRecord(r, absl::StrCat("ends after ", produced, " of its ", size, " bytes (truncated deflate data)"));
    }
  }
  if (produced != size) return BadRecord(r, absl::StrCat("inflates to ", produced, " bytes, not the ", size, " it declares"));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ZipReader::ReadSmall(absl::string_view name, uint64_t max_bytes) const {
  const ZipRecord* r = Find(name);
  if (r == nullptr) return absl::NotFoundError(absl::StrCat("'", name_, "': no record ", Quote(absl::StrCat(top_, name))));
  if (r->size > max_bytes) return BadRecord(*r, absl::StrCat("declares ", r->size, " bytes, more than the ", max_bytes, " allowed"));
  std::string out(r->size, '\0');
  SL_RETURN_IF_ERROR(ReadInto(*r, out.data(), out.size()));
  return out;
}

}  // namespace shardlight::sharded::checkpoint::pytorch
