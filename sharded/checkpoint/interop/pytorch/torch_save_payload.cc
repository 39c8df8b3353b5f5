#include "sharded/checkpoint/interop/pytorch/torch_save_payload.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint::pytorch {
namespace {

constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint32_t kZip64EndOfDirectory = 0x06064b50;
constexpr uint32_t kDirectoryEntry = 0x02014b50;
constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr int64_t kEndBytes = 22;
constexpr int64_t kLocatorBytes = 20;
constexpr int64_t kZip64EndBytes = 56;
constexpr int64_t kEntryBytes = 46;
constexpr int64_t kLocalBytes = 30;
constexpr int64_t kMaxComment = 0xFFFF;

uint64_t Le(const char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

absl::Status Bad(const std::string& display, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(display, ": ", what));
}

// Bytes [at, at + n) of the archive (archive-relative offsets).
absl::StatusOr<std::string> ReadRange(const File& file, int64_t base, int64_t length, int64_t at, int64_t n,
                                      const std::string& display, const std::string& what) {
  if (at < 0 || n < 0 || at > length || n > length - at) {
    return Bad(display, absl::StrCat(what, " at archive bytes [", at, ", ", at + n, ") lies outside the archive's ",
                                     length, " bytes"));
  }
  std::string out(static_cast<size_t>(n), '\0');
  SL_RETURN_IF_ERROR(file.ReadAt(out.data(), n, base + at));
  return out;
}

struct DirectoryEntry {
  std::string name;
  int64_t local = 0;
  int64_t size = 0;
};

// The zip64 extended-information field: the 8-byte values of the fields
// whose 32-bit value is 0xFFFFFFFF, in the order uncompressed, compressed,
// local offset.
absl::Status ApplyZip64Extra(absl::string_view extra, uint64_t* uncompressed, uint64_t* compressed, uint64_t* local,
                             const std::string& display, const std::string& name) {
  size_t pos = 0;
  while (pos + 4 <= extra.size()) {
    const uint64_t tag = Le(extra.data() + pos, 2);
    const uint64_t n = Le(extra.data() + pos + 2, 2);
    if (pos + 4 + n > extra.size()) return Bad(display, absl::StrCat("record '", name, "': a truncated extra field"));
    if (tag == 1) {
      const char* p = extra.data() + pos + 4;
      size_t used = 0;
      for (uint64_t* field : {uncompressed, compressed, local}) {
        if (*field != 0xFFFFFFFFu) continue;
        if (used + 8 > n) return Bad(display, absl::StrCat("record '", name, "': a short zip64 extra field"));
        *field = Le(p + used, 8);
        used += 8;
      }
    }
    pos += 4 + n;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DirectoryEntry>> ReadDirectory(const File& file, int64_t base, int64_t length,
                                                          const std::string& display) {
  if (length < kEndBytes) return Bad(display, absl::StrCat("only ", length, " bytes: not a torch.save archive"));
  const int64_t tail_bytes = std::min(length, kEndBytes + kMaxComment);
  SL_ASSIGN_OR_RETURN(const std::string tail,
                      ReadRange(file, base, length, length - tail_bytes, tail_bytes, display, "the archive's end"));
  int64_t end = -1;  // offset of the end record in `tail`
  for (int64_t i = tail_bytes - kEndBytes; i >= 0; --i) {
    if (Le(tail.data() + i, 4) == kEndOfDirectory &&
        i + kEndBytes + static_cast<int64_t>(Le(tail.data() + i + 20, 2)) == tail_bytes) {
      end = i;
      break;
    }
  }
  if (end < 0) return Bad(display, "no zip end-of-central-directory record: not a torch.save archive, or truncated");
  const char* e = tail.data() + end;
  if (Le(e + 4, 2) != 0 || Le(e + 6, 2) != 0) return Bad(display, "a multi-disk zip archive");
  uint64_t count = Le(e + 10, 2);
  uint64_t dir_bytes = Le(e + 12, 4);
  uint64_t dir_offset = Le(e + 16, 4);
  if (count == 0xFFFF || dir_bytes == 0xFFFFFFFFu || dir_offset == 0xFFFFFFFFu) {
    const int64_t end_at = length - tail_bytes + end;
    SL_ASSIGN_OR_RETURN(const std::string loc, ReadRange(file, base, length, end_at - kLocatorBytes, kLocatorBytes,
                                                         display, "the zip64 locator"));
    if (Le(loc.data(), 4) != kZip64Locator) return Bad(display, "a zip64 archive without its zip64 locator");
    const uint64_t at = Le(loc.data() + 8, 8);
    if (at > static_cast<uint64_t>(length)) return Bad(display, "the zip64 end record lies outside the archive");
    SL_ASSIGN_OR_RETURN(const std::string z, ReadRange(file, base, length, static_cast<int64_t>(at), kZip64EndBytes,
                                                       display, "the zip64 end record"));
    if (Le(z.data(), 4) != kZip64EndOfDirectory) return Bad(display, "a bad zip64 end-of-central-directory record");
    count = Le(z.data() + 32, 8);
    dir_bytes = Le(z.data() + 40, 8);
    dir_offset = Le(z.data() + 48, 8);
  }
  if (count > static_cast<uint64_t>(kMaxPayloadRecords)) {
    return Bad(display, absl::StrCat("the zip directory declares ", count, " records; at most ", kMaxPayloadRecords,
                                     " are read"));
  }
  if (dir_offset > static_cast<uint64_t>(length) || dir_bytes > static_cast<uint64_t>(length) - dir_offset ||
      count * kEntryBytes > dir_bytes) {
    return Bad(display, absl::StrCat("the zip directory (", count, " records, ", dir_bytes, " bytes at ", dir_offset,
                                     ") does not fit the archive's ", length, " bytes"));
  }
  SL_ASSIGN_OR_RETURN(const std::string dir,
                      ReadRange(file, base, length, static_cast<int64_t>(dir_offset), static_cast<int64_t>(dir_bytes),
                                display, "the zip directory"));
  std::vector<DirectoryEntry> out;
  out.reserve(count);
  size_t pos = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (pos + kEntryBytes > dir.size() || Le(dir.data() + pos, 4) != kDirectoryEntry) {
      return Bad(display, absl::StrCat("zip directory record ", i, " is malformed"));
    }
    const char* d = dir.data() + pos;
    const uint64_t flags = Le(d + 8, 2);
    const uint64_t method = Le(d + 10, 2);
    uint64_t compressed = Le(d + 20, 4);
    uint64_t uncompressed = Le(d + 24, 4);
    const size_t name_len = Le(d + 28, 2), extra_len = Le(d + 30, 2), comment_len = Le(d + 32, 2);
    uint64_t local = Le(d + 42, 4);
    if (pos + kEntryBytes + name_len + extra_len + comment_len > dir.size()) {
      return Bad(display, absl::StrCat("zip directory record ", i, " runs past the directory"));
    }
    std::string name(d + kEntryBytes, name_len);
    SL_RETURN_IF_ERROR(ApplyZip64Extra(absl::string_view(d + kEntryBytes + name_len, extra_len), &uncompressed,
                                       &compressed, &local, display, name));
    if ((flags & 1) != 0) return Bad(display, absl::StrCat("record '", name, "' is encrypted"));
    if (method != 0 || compressed != uncompressed) {
      return Bad(display, absl::StrCat("record '", name, "' is compressed (zip method ", method, ", ", compressed,
                                       " bytes declared to hold ", uncompressed,
                                       "); torch.save stores records uncompressed, and none is inflated here"));
    }
    if (uncompressed > static_cast<uint64_t>(length) || local > static_cast<uint64_t>(length)) {
      return Bad(display, absl::StrCat("record '", name, "' declares ", uncompressed, " bytes at ", local,
                                       ", outside the archive's ", length, " bytes"));
    }
    out.push_back({std::move(name), static_cast<int64_t>(local), static_cast<int64_t>(uncompressed)});
    pos += kEntryBytes + name_len + extra_len + comment_len;
  }
  return out;
}

}  // namespace

absl::StatusOr<TorchSavePayload> TorchSavePayload::Open(const File& file, int64_t begin, int64_t length,
                                                        const std::string& display, ObjectState objects) {
  SL_ASSIGN_OR_RETURN(const int64_t file_size, file.Size());
  if (begin < 0 || length < 0 || begin > file_size || length > file_size - begin) {
    return absl::DataLossError(absl::StrCat(display, ": bytes [", begin, ", ", begin + length,
                                            ") are past the end of the file (", file_size, " bytes): truncated"));
  }
  SL_ASSIGN_OR_RETURN(std::vector<DirectoryEntry> entries, ReadDirectory(file, begin, length, display));
  TorchSavePayload p;
  p.display_ = display;
  // Data ranges from the local headers; records may neither overlap nor
  // leave the archive.
  std::vector<std::pair<int64_t, int64_t>> spans;  // [local header, data end)
  for (DirectoryEntry& e : entries) {
    SL_ASSIGN_OR_RETURN(const std::string h,
                        ReadRange(file, begin, length, e.local, kLocalBytes, display, "record '" + e.name + "'"));
    if (Le(h.data(), 4) != kLocalHeader) return Bad(display, absl::StrCat("record '", e.name, "' has no local header"));
    const int64_t data = e.local + kLocalBytes + static_cast<int64_t>(Le(h.data() + 26, 2) + Le(h.data() + 28, 2));
    if (data > length || e.size > length - data) {
      return Bad(display, absl::StrCat("record '", e.name, "' (", e.size, " bytes) runs past the archive's end"));
    }
    spans.emplace_back(e.local, data + e.size);
    const size_t slash = e.name.find('/');
    if (slash == std::string::npos || slash == 0) {
      return Bad(display, absl::StrCat("record '", e.name, "' is not inside the archive's folder"));
    }
    const std::string folder = e.name.substr(0, slash);
    if (p.folder_.empty()) p.folder_ = folder;
    if (folder != p.folder_) {
      return Bad(display, absl::StrCat("records under two folders ('", p.folder_, "' and '", folder, "')"));
    }
    if (!p.records_.emplace(e.name.substr(slash + 1), PayloadRecord{begin + data, e.size}).second) {
      return Bad(display, absl::StrCat("record '", e.name, "' appears twice"));
    }
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first < spans[i - 1].second) return Bad(display, "two zip records overlap");
  }
  if (auto order = p.Record("byteorder"); order.ok()) {
    SL_ASSIGN_OR_RETURN(const std::string text, ReadRange(file, 0, file_size, order->begin, std::min<int64_t>(order->size, 16),
                                                          display, "record 'byteorder'"));
    if (text != "little") return Bad(display, absl::StrCat("byte order '", text, "': only little-endian archives are read"));
  }
  auto pickle = p.Record("data.pkl");
  if (!pickle.ok()) return Bad(display, "no data.pkl record: not a torch.save archive (or a legacy pre-1.6 one)");
  SL_ASSIGN_OR_RETURN(const std::string bytes,
                      ReadRange(file, 0, file_size, pickle->begin, pickle->size, display, "data.pkl"));
  auto graph = ReadPickle(bytes, PickleLimits(), objects);
  if (!graph.ok()) return Bad(display, absl::StrCat("data.pkl: ", graph.status().message()));
  p.graph_ = *std::move(graph);
  return p;
}

absl::StatusOr<PayloadRecord> TorchSavePayload::Record(const std::string& name) const {
  auto it = records_.find(name);
  if (it == records_.end()) return absl::NotFoundError(absl::StrCat(display_, ": no record '", folder_, "/", name, "'"));
  return it->second;
}

absl::StatusOr<PayloadTensor> TorchSavePayload::Tensor(int node, const std::string& what) const {
  const PickleNode& t = graph_.node(node);
  if (t.kind != PickleKind::kTensor) {
    return Bad(display_, absl::StrCat(what, " is a ", PickleKindName(t.kind), ", not a tensor"));
  }
  const PickleNode& storage = graph_.node(t.storage);
  auto record = Record("data/" + storage.text);
  if (!record.ok()) return Bad(display_, absl::StrCat(what, ": ", record.status().message()));
  const int64_t element = static_cast<int64_t>(c10::elementSize(storage.dtype));
  if (storage.numel < 0 || record->size != storage.numel * element) {
    return Bad(display_, absl::StrCat(what, ": storage record 'data/", storage.text, "' holds ", record->size,
                                      " bytes but its storage declares ", storage.numel, " elements of ", element,
                                      " bytes"));
  }
  if (t.sizes.size() != t.strides.size()) {
    return Bad(display_, absl::StrCat(what, ": ", t.sizes.size(), " sizes but ", t.strides.size(), " strides"));
  }
  int64_t numel = 1;
  bool overflow = false, empty = false;
  for (int64_t s : t.sizes) {
    if (s < 0) return Bad(display_, absl::StrCat(what, ": a negative size"));
    empty = empty || s == 0;
    overflow = overflow || __builtin_mul_overflow(numel, s, &numel);
  }
  if (empty) numel = 0;
  if (overflow && !empty) return Bad(display_, absl::StrCat(what, ": its sizes overflow"));
  if (numel > 0) {
    int64_t expected = 1;
    for (size_t i = t.sizes.size(); i-- > 0;) {
      if (t.sizes[i] != 1 && t.strides[i] != expected) {
        return absl::UnimplementedError(absl::StrCat(display_, ": ", what, " is stored with strides (",
                                                     absl::StrJoin(t.strides, ", "), ") for sizes (",
                                                     absl::StrJoin(t.sizes, ", "),
                                                     "), not row-major; such layouts are not read"));
      }
      expected *= t.sizes[i];
    }
  }
  if (t.storage_offset < 0 || numel > storage.numel || t.storage_offset > storage.numel - numel) {
    return Bad(display_, absl::StrCat(what, ": ", numel, " elements at storage offset ", t.storage_offset,
                                      " overrun its storage of ", storage.numel));
  }
  PayloadTensor out;
  out.dtype = t.dtype;
  out.sizes = t.sizes;
  out.begin = record->begin + t.storage_offset * element;
  out.end = out.begin + numel * element;
  return out;
}

}  // namespace shardlight::sharded::checkpoint::pytorch
