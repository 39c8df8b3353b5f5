#include "sharded/checkpoint/format/safetensors.h"

#include <algorithm>

#include "absl/base/attributes.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/format/dtype_names.h"
#include "sharded/checkpoint/format/json_fields.h"
#include "sharded/checkpoint/format/json_stream.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/shard_metadata.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {
namespace {

constexpr size_t kMaxDims = 64;
// {"name": {"shape": [..]}}: three levels; one spare.
constexpr int kMaxHeaderDepth = 4;

absl::Status Bad(const std::string& file, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("data file ", Quote(file), ": ", what));
}

// The byte count of an entry, or an error naming it.
absl::StatusOr<int64_t> EntryBytes(const std::string& dtype_name, const std::vector<int64_t>& shape,
                                   const std::string& what) {
  const auto dtype = DtypeFromName(dtype_name);
  if (!dtype) return absl::InvalidArgumentError(absl::StrCat(what, ": ", UnknownDtypeMessage(dtype_name)));
  auto n = CheckedNumElements(shape);
  if (!n.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", n.status().message()));
  const int64_t elem = DtypeBytes(*dtype);
  if (*n > INT64_MAX / elem) return absl::InvalidArgumentError(absl::StrCat(what, ": byte size overflows"));
  return *n * elem;
}

bool IsEntryField(absl::string_view key) { return key == "dtype" || key == "shape" || key == "data_offsets"; }

// One entry of a header, checked against the data region's size; the reader
// stands before its '{'. A decoding error is returned as the entry's; the
// reader's own failure stays in the reader.
absl::Status DecodeEntry(JsonReader& r, absl::string_view name, int64_t data_bytes, SafetensorsEntry* e) {
  const std::string what = absl::StrCat("entry ", Quote(name));
  e->name.assign(name.data(), name.size());
  absl::Status dtype = MissingField(what, " dtype"), shape = MissingField(what, " shape");
  absl::Status offsets_ok = MissingField(what, " data_offsets");
  std::vector<int64_t> offsets;
  if (!r.BeginObject(/*kept=*/true)) return r.status();
  absl::string_view key;
  while (r.NextKey(&key)) {
    if (key == "dtype") {
      dtype = ReadString(r, what, " dtype", &e->dtype);
    } else if (key == "shape") {
      shape = ReadInt64Array(r, what, " shape", kMaxDims, 0, INT64_MAX, &e->shape);
    } else if (key == "data_offsets") {
      offsets_ok = ReadInt64Array(r, what, " data_offsets", 2, 0, INT64_MAX, &offsets);
    } else {
      r.Skip(/*kept=*/false);
    }
  }
  SL_RETURN_IF_ERROR(r.status());
  SL_RETURN_IF_ERROR(dtype);
  SL_RETURN_IF_ERROR(shape);
  SL_RETURN_IF_ERROR(offsets_ok);
  if (offsets.size() != 2 || offsets[0] > offsets[1]) {
    return absl::InvalidArgumentError(absl::StrCat(what, " data_offsets are not [begin, end] with begin <= end"));
  }
  e->begin = offsets[0];
  e->end = offsets[1];
  SL_ASSIGN_OR_RETURN(const auto bytes, EntryBytes(e->dtype, e->shape, what));
  if (e->end - e->begin != bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " data_offsets [", e->begin, ", ", e->end, "] hold ",
                                                   e->end - e->begin, " bytes; dtype ", e->dtype, " and shape ",
                                                   ShapeToString(e->shape), " need ", bytes));
  }
  if (e->end > data_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " data_offsets [", e->begin, ", ", e->end,
                                                   "] are out of range: the data region has ", data_bytes, " bytes"));
  }
  return absl::OkStatus();
}

// "__metadata__": string values only; the reader stands before its '{'.
absl::Status DecodeMetadata(JsonReader& r, std::map<std::string, std::string>* metadata,
                            const std::string& display_name) {
  std::string bad;  // the least key whose value is not a string
  bool any_bad = false;
  if (!r.BeginObject(/*kept=*/true)) return r.status();
  absl::string_view key;
  JsonReader::Type type;
  while (r.NextKey(&key)) {
    if (!r.Peek(&type)) break;
    if (type == JsonReader::Type::kString) {
      const std::string name(key);
      absl::string_view value;
      if (!r.ReadString(&value)) break;
      (*metadata)[name] = std::string(value);
      continue;
    }
    if (!any_bad || key < absl::string_view(bad)) bad = std::string(key);
    any_bad = true;
    if (!r.Skip(/*kept=*/true)) break;
  }
  SL_RETURN_IF_ERROR(r.status());
  if (any_bad) return Bad(display_name, absl::StrCat("__metadata__ value ", Quote(bad), " is not a string"));
  return absl::OkStatus();
}

}  // namespace

const SafetensorsEntry* SafetensorsHeader::Find(const std::string& name) const {
  for (const SafetensorsEntry& e : entries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

absl::StatusOr<int64_t> AssignDataOffsets(std::vector<SafetensorsEntry>& entries) {
  int64_t pos = 0;
  for (SafetensorsEntry& e : entries) {
    SL_ASSIGN_OR_RETURN(auto bytes, EntryBytes(e.dtype, e.shape, absl::StrCat("entry ", Quote(e.name))));
    if (bytes > INT64_MAX - pos) return absl::InvalidArgumentError("data size overflows");
    e.begin = pos;
    e.end = pos + bytes;
    pos = e.end;
  }
  return pos;
}

// Inlined: a header check calls it about 16 times an entry.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void SafetensorsHeaderWriter::Put(absl::string_view piece) {
  put_ += static_cast<int64_t>(piece.size());
  if (!checking_) {
    out_.append(piece.data(), piece.size());
  } else if (matched_) {
    matched_ = absl::StartsWith(rest_, piece);
    if (matched_) rest_.remove_prefix(piece.size());
  }
}

SafetensorsHeaderWriter::SafetensorsHeaderWriter(const std::map<std::string, std::string>& metadata,
                                                 size_t entries)
    : out_(8, '\0') {
  // Written out directly, one entry after another: an ordered_json object
  // finds each new key by a linear scan, which made a header of n entries
  // cost O(n^2). A load compares a file's header with this spelling
  // (CheckpointReader), so it is part of that check's fast path.
  out_.reserve(8 + 64 + entries * 80);
  Begin(metadata);
}

SafetensorsHeaderWriter::SafetensorsHeaderWriter(absl::string_view json,
                                                 const std::map<std::string, std::string>& metadata)
    : rest_(json), checking_(true) {
  Begin(metadata);
}

void SafetensorsHeaderWriter::Begin(const std::map<std::string, std::string>& metadata) {
  Put("{");
  if (!metadata.empty()) {
    Put("\"__metadata__\":{");
    for (auto it = metadata.begin(); it != metadata.end(); ++it) {
      if (it != metadata.begin()) Put(",");
      PutJsonString(it->first);
      Put(":");
      PutJsonString(it->second);
    }
    Put("}");
    first_ = false;
  }
}

void SafetensorsHeaderWriter::PutInt(int64_t value) { Put(absl::AlphaNum(value).Piece()); }

// Both modes: the string escaped into a buffer reused from call to call.
void SafetensorsHeaderWriter::PutJsonString(absl::string_view text) {
  quoted_.clear();
  AppendJsonString(&quoted_, text);
  Put(quoted_);
}

// The closing brace, then spaces (valid JSON whitespace) that align the data
// to 8 bytes.
void SafetensorsHeaderWriter::Close() {
  Put("}");
  Put(absl::string_view("        ", static_cast<size_t>((8 - (8 + put_) % 8) % 8)));
}

void SafetensorsHeaderWriter::Add(absl::string_view name, absl::string_view dtype, absl::Span<const int64_t> shape,
                                  int64_t begin, int64_t end) {
  if (!first_) Put(",");
  first_ = false;
  PutJsonString(name);
  Put(":{\"dtype\":");
  PutJsonString(dtype);
  Put(",\"shape\":[");
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) Put(",");
    PutInt(shape[i]);
  }
  Put("],\"data_offsets\":[");
  PutInt(begin);
  Put(",");
  PutInt(end);
  Put("]}");
}

std::string SafetensorsHeaderWriter::Finish() && {
  Close();
  const uint64_t n = out_.size() - 8;
  for (int i = 0; i < 8; ++i) out_[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return std::move(out_);
}

bool SafetensorsHeaderWriter::Matches() && {
  Close();
  return matched_ && rest_.empty();
}

std::string EncodeSafetensorsHeader(const std::vector<SafetensorsEntry>& entries,
                                    const std::map<std::string, std::string>& metadata) {
  SafetensorsHeaderWriter writer(metadata, entries.size());
  for (const SafetensorsEntry& e : entries) writer.Add(e.name, e.dtype, e.shape, e.begin, e.end);
  return std::move(writer).Finish();
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const std::string& json, int64_t data_bytes,
                                                         const std::string& display_name) {
  SafetensorsHeader header;
  header.header_bytes = static_cast<int64_t>(json.size());
  // Entries are decoded as they end; an entry's error stops the parse.
  JsonLimits limits;
  limits.max_depth = kMaxHeaderDepth;
  limits.max_array_length = kMaxDims;
  limits.keep_nested = IsEntryField;
  JsonReader r(json, limits, absl::StrCat("data file ", Quote(display_name), ": header"));
  std::string not_object;  // the least root member that is not an object
  bool any_not_object = false, root_object = false;
  JsonReader::Type type;
  if (r.Peek(&type) && type == JsonReader::Type::kObject) {
    root_object = true;
    r.BeginObject(/*kept=*/true);
    absl::string_view name;
    while (r.NextKey(&name)) {
      if (!r.Peek(&type)) break;
      if (type != JsonReader::Type::kObject) {
        if (!any_not_object || name < absl::string_view(not_object)) not_object = std::string(name);
        any_not_object = true;
        r.Skip(/*kept=*/true);
      } else if (name == "__metadata__") {
        // Held in `s`: a broken reader's own error comes first (the break).
        absl::Status s = DecodeMetadata(r, &header.metadata, display_name);
        if (!r.ok()) break;
        SL_RETURN_IF_ERROR(s);
      } else {
        SafetensorsEntry e;
        absl::Status s = DecodeEntry(r, name, data_bytes, &e);
        if (!r.ok()) break;
        if (!s.ok()) return Bad(display_name, std::string(s.message()));
        header.entries.push_back(std::move(e));
      }
    }
  } else if (r.ok()) {
    r.Skip(/*kept=*/true);
  }
  r.End();
  SL_RETURN_IF_ERROR(r.status());
  if (!root_object) return Bad(display_name, "header is not a JSON object");
  // Records took every object member; what is left is not an object.
  if (any_not_object) {
    if (not_object == "__metadata__") return Bad(display_name, "__metadata__ is not an object");
    return Bad(display_name, absl::StrCat("entry ", Quote(not_object), " is not an object"));
  }
  std::sort(header.entries.begin(), header.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& e : header.entries) {
    if (e.begin == e.end) continue;  // empty entries occupy no bytes
    if (previous != nullptr && previous->end > e.begin) {
      return Bad(display_name, absl::StrCat("entries ", Quote(previous->name), " [", previous->begin, ", ", previous->end,
                                            ") and ", Quote(e.name), " [", e.begin, ", ", e.end, ") overlap"));
    }
    previous = &e;
  }
  return header;
}

absl::StatusOr<int64_t> ReadSafetensorsHeaderLength(const File& file, int64_t file_size,
                                                    const std::string& display_name, int64_t* bytes_read) {
  if (file_size < 8) {
    return Bad(display_name, absl::StrCat("has ", file_size, " bytes, too short for a header length (truncated?)"));
  }
  unsigned char prefix[8];
  absl::Status s = file.ReadAt(prefix, 8, 0);
  if (!s.ok()) return Bad(display_name, std::string(s.message()));
  if (bytes_read) *bytes_read += 8;
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(prefix[i]) << (8 * i);
  if (n > static_cast<uint64_t>(file_size - 8)) {
    return Bad(display_name, absl::StrCat("header length ", n, " is larger than the file (", file_size, " bytes)"));
  }
  return static_cast<int64_t>(n);
}

absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(const File& file, int64_t file_size,
                                                        const std::string& display_name, int64_t max_header_bytes,
                                                        int64_t* bytes_read) {
  // Both checks come before the allocation: a hostile length costs nothing.
  SL_ASSIGN_OR_RETURN(auto n, ReadSafetensorsHeaderLength(file, file_size, display_name, bytes_read));
  if (n > max_header_bytes) {
    return Bad(display_name, absl::StrCat("header length ", n, " exceeds the limit of ", max_header_bytes, " bytes"));
  }
  std::string json(static_cast<size_t>(n), '\0');
  absl::Status s = file.ReadAt(json.data(), n, 8);
  if (!s.ok()) return Bad(display_name, std::string(s.message()));
  if (bytes_read) *bytes_read += n;
  return ParseSafetensorsHeader(json, file_size - 8 - n, display_name);
}

}  // namespace shardlight::sharded::checkpoint
