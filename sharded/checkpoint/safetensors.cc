#include "sharded/checkpoint/safetensors.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/checkpoint/dtype_names.h"
#include "sharded/checkpoint/json_fields.h"
#include "sharded/checkpoint/names.h"
#include "sharded/shard_metadata.h"

namespace shardlight::sharded::checkpoint {
namespace {

constexpr size_t kMaxDims = 64;

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
    auto bytes = EntryBytes(e.dtype, e.shape, absl::StrCat("entry ", Quote(e.name)));
    if (!bytes.ok()) return bytes.status();
    if (*bytes > INT64_MAX - pos) return absl::InvalidArgumentError("data size overflows");
    e.begin = pos;
    e.end = pos + *bytes;
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
  nlohmann::json doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return Bad(display_name, "header is not a JSON object");
  SafetensorsHeader header;
  header.header_bytes = static_cast<int64_t>(json.size());
  try {
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      const std::string& name = it.key();
      if (name == "__metadata__") {
        if (!it->is_object()) return Bad(display_name, "__metadata__ is not an object");
        for (auto m = it->begin(); m != it->end(); ++m) {
          if (!m->is_string()) return Bad(display_name, absl::StrCat("__metadata__ value ", Quote(m.key()), " is not a string"));
          header.metadata[m.key()] = m->get<std::string>();
        }
        continue;
      }
      const std::string what = absl::StrCat("entry ", Quote(name));
      if (!it->is_object()) return Bad(display_name, absl::StrCat(what, " is not an object"));
      SafetensorsEntry e;
      e.name = name;
      auto dtype = AsString(Field(*it, "dtype"), what + " dtype");
      if (!dtype.ok()) return Bad(display_name, std::string(dtype.status().message()));
      e.dtype = *dtype;
      auto shape = AsInt64Array(Field(*it, "shape"), what + " shape", kMaxDims);
      if (!shape.ok()) return Bad(display_name, std::string(shape.status().message()));
      e.shape = *shape;
      auto offsets = AsInt64Array(Field(*it, "data_offsets"), what + " data_offsets", 2);
      if (!offsets.ok()) return Bad(display_name, std::string(offsets.status().message()));
      if (offsets->size() != 2 || (*offsets)[0] > (*offsets)[1]) {
        return Bad(display_name, absl::StrCat(what, " data_offsets are not [begin, end] with begin <= end"));
      }
      e.begin = (*offsets)[0];
      e.end = (*offsets)[1];
      auto bytes = EntryBytes(e.dtype, e.shape, what);
      if (!bytes.ok()) return Bad(display_name, std::string(bytes.status().message()));
      if (e.end - e.begin != *bytes) {
        return Bad(display_name, absl::StrCat(what, " data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin,
                                              " bytes; dtype ", e.dtype, " and shape ", ShapeToString(e.shape),
                                              " need ", *bytes));
      }
      if (e.end > data_bytes) {
        return Bad(display_name, absl::StrCat(what, " data_offsets [", e.begin, ", ", e.end,
                                              "] are out of range: the data region has ", data_bytes, " bytes"));
      }
      header.entries.push_back(std::move(e));
    }
  } catch (const nlohmann::json::exception& ex) {
    return Bad(display_name, absl::StrCat("malformed header: ", ex.what()));
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
  auto n = ReadSafetensorsHeaderLength(file, file_size, display_name, bytes_read);
  if (!n.ok()) return n.status();
  if (*n > max_header_bytes) {
    return Bad(display_name, absl::StrCat("header length ", *n, " exceeds the limit of ", max_header_bytes, " bytes"));
  }
  std::string json(static_cast<size_t>(*n), '\0');
  absl::Status s = file.ReadAt(json.data(), *n, 8);
  if (!s.ok()) return Bad(display_name, std::string(s.message()));
  if (bytes_read) *bytes_read += *n;
  return ParseSafetensorsHeader(json, file_size - 8 - *n, display_name);
}

}  // namespace shardlight::sharded::checkpoint
