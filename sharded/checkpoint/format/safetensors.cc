#include "sharded/checkpoint/format/safetensors.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
  if (!dtype) return absl::InvalidArgumentError(absl::StrCat(what, " has unknown dtype ", Quote(dtype_name)));
  auto n = CheckedNumElements(shape);
  if (!n.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", n.status().message()));
  const int64_t elem = DtypeBytes(*dtype);
  if (*n > INT64_MAX / elem) return absl::InvalidArgumentError(absl::StrCat(what, ": byte size overflows"));
  return *n * elem;
}

// One entry of a header, checked against the data region's size.
absl::StatusOr<SafetensorsEntry> DecodeEntry(const std::string& name, const nlohmann::json& j, int64_t data_bytes) {
  const std::string what = absl::StrCat("entry ", Quote(name));
  SafetensorsEntry e;
  e.name = name;
  auto dtype = AsString(Field(j, "dtype"), what + " dtype");
  if (!dtype.ok()) return dtype.status();
  e.dtype = *dtype;
  auto shape = AsInt64Array(Field(j, "shape"), what + " shape", kMaxDims);
  if (!shape.ok()) return shape.status();
  e.shape = *shape;
  SL_ASSIGN_OR_RETURN(auto offsets, AsInt64Array(Field(j, "data_offsets"), what + " data_offsets", 2));
  if (offsets.size() != 2 || (offsets)[0] > (offsets)[1]) {
    return absl::InvalidArgumentError(absl::StrCat(what, " data_offsets are not [begin, end] with begin <= end"));
  }
  e.begin = (offsets)[0];
  e.end = (offsets)[1];
  auto bytes = EntryBytes(e.dtype, e.shape, what);
  if (!bytes.ok()) return bytes.status();
  if (e.end - e.begin != *bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " data_offsets [", e.begin, ", ", e.end, "] hold ",
                                                   e.end - e.begin, " bytes; dtype ", e.dtype, " and shape ",
                                                   ShapeToString(e.shape), " need ", *bytes));
  }
  if (e.end > data_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " data_offsets [", e.begin, ", ", e.end,
                                                   "] are out of range: the data region has ", data_bytes, " bytes"));
  }
  return e;
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

std::string EncodeSafetensorsHeader(const std::vector<SafetensorsEntry>& entries,
                                    const std::map<std::string, std::string>& metadata) {
  // Written out directly, one entry after another: an ordered_json object
  // finds each new key by a linear scan, which made a header of n entries
  // cost O(n^2). Strings go through nlohmann for escaping.
  using Json = nlohmann::json;
  std::string json = "{";
  bool first = true;
  if (!metadata.empty()) {
    json += "\"__metadata__\":";
    Json m = Json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    json += m.dump();
    first = false;
  }
  for (const SafetensorsEntry& e : entries) {
    absl::StrAppend(&json, first ? "" : ",", Json(e.name).dump(), ":{\"dtype\":", Json(e.dtype).dump(),
                    ",\"shape\":[", absl::StrJoin(e.shape, ","), "],\"data_offsets\":[", e.begin, ",", e.end, "]}");
    first = false;
  }
  json += "}";
  // Spaces are valid JSON whitespace; they align the data to 8 bytes.
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + json;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const std::string& json, int64_t data_bytes,
                                                         const std::string& display_name) {
  SafetensorsHeader header;
  header.header_bytes = static_cast<int64_t>(json.size());
  // Entries are records: memory holds one at a time plus the parsed entries.
  JsonStreamSpec spec;
  spec.max_depth = kMaxHeaderDepth;
  spec.max_array_length = kMaxDims;
  spec.keep_member = [](const std::string& path, const std::string& key) {
    if (path.empty()) return true;  // entry names and __metadata__
    if (path == "/__metadata__") return true;
    return key == "dtype" || key == "shape" || key == "data_offsets";
  };
  spec.is_record = [](const std::string&, int depth) { return depth == 2; };
  spec.on_record = [&](const std::string&, const std::string& name, nlohmann::json&& j) -> absl::Status {
    if (name == "__metadata__") {
      for (auto m = j.begin(); m != j.end(); ++m) {
        if (!m->is_string()) return Bad(display_name, absl::StrCat("__metadata__ value ", Quote(m.key()), " is not a string"));
        header.metadata[m.key()] = m->get<std::string>();
      }
      return absl::OkStatus();
    }
    auto e = DecodeEntry(name, j, data_bytes);
    if (!e.ok()) return Bad(display_name, std::string(e.status().message()));
    header.entries.push_back(*std::move(e));
    return absl::OkStatus();
  };
  auto doc = ParseJsonStream(json, spec, absl::StrCat("data file ", Quote(display_name), ": header"));
  if (!doc.ok()) return doc.status();
  if (!doc->is_object()) return Bad(display_name, "header is not a JSON object");
  // Records took every object member; what is left is not an object.
  if (!doc->empty()) {
    const std::string& name = doc->begin().key();
    if (name == "__metadata__") return Bad(display_name, "__metadata__ is not an object");
    return Bad(display_name, absl::StrCat("entry ", Quote(name), " is not an object"));
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
