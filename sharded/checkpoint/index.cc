#include "sharded/checkpoint/index.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/dtype_names.h"
#include "sharded/checkpoint/json_fields.h"
#include "sharded/checkpoint/names.h"

namespace shardlight::sharded::checkpoint {
namespace {

constexpr char kFormatName[] = "shardlight.checkpoint";
constexpr size_t kMaxDims = 64;
constexpr int kMaxWorldSize = 1 << 20;

using Json = nlohmann::json;

}  // namespace

std::string EncodeCrcHex(const std::vector<uint32_t>& crcs) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(crcs.size() * 8);
  for (uint32_t c : crcs) {
    for (int shift = 28; shift >= 0; shift -= 4) out.push_back(kHex[(c >> shift) & 0xF]);
  }
  return out;
}

bool DecodeCrcHex(const std::string& hex, std::vector<uint32_t>* crcs) {
  if (hex.size() % 8 != 0) return false;
  crcs->clear();
  crcs->reserve(hex.size() / 8);
  for (size_t i = 0; i < hex.size(); i += 8) {
    uint32_t c = 0;
    for (size_t j = i; j < i + 8; ++j) {
      const char h = hex[j];
      uint32_t v;
      if (h >= '0' && h <= '9') {
        v = h - '0';
      } else if (h >= 'a' && h <= 'f') {
        v = h - 'a' + 10;
      } else {
        return false;
      }
      c = (c << 4) | v;
    }
    crcs->push_back(c);
  }
  return true;
}

namespace {

absl::Status Bad(const std::string& index_name, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("checkpoint index ", Quote(index_name), ": ", what));
}

absl::Status BadKey(const std::string& index_name, const std::string& key, const std::string& what) {
  return Bad(index_name, absl::StrCat("key ", Quote(key), ": ", what));
}

// Decodes (without cross-checks) one shard object.
absl::StatusOr<IndexShard> DecodeShard(const Json& j, const std::string& what) {
  IndexShard s;
  auto offsets = AsInt64Array(Field(j, "offsets"), what + " offsets", kMaxDims);
  if (!offsets.ok()) return offsets.status();
  s.offsets = *offsets;
  auto sizes = AsInt64Array(Field(j, "sizes"), what + " sizes", kMaxDims);
  if (!sizes.ok()) return sizes.status();
  s.sizes = *sizes;
  auto rank = AsInt64(Field(j, "rank"), what + " rank", 0, kMaxWorldSize);
  if (!rank.ok()) return rank.status();
  s.rank = static_cast<int>(*rank);
  auto file = AsString(Field(j, "file"), what + " file");
  if (!file.ok()) return file.status();
  s.file = *file;
  auto entry = AsString(Field(j, "entry"), what + " entry");
  if (!entry.ok()) return entry.status();
  s.entry = *entry;
  auto range = AsInt64Array(Field(j, "byte_range"), what + " byte_range", 2);
  if (!range.ok()) return range.status();
  if (range->size() != 2) return absl::InvalidArgumentError(what + " byte_range is not [begin, end]");
  s.begin = (*range)[0];
  s.end = (*range)[1];
  auto crcs = AsString(Field(j, "crc32c"), what + " crc32c");
  if (!crcs.ok()) return crcs.status();
  if (!DecodeCrcHex(*crcs, &s.block_crcs)) {
    return absl::InvalidArgumentError(what + " crc32c is not a string of 8-digit lowercase hex checksums");
  }
  return s;
}

}  // namespace

ShardedTensorMetadata IndexTensor::Metadata() const {
  ShardedTensorMetadata m;
  m.sizes = shape;
  m.properties.dtype = dtype;
  for (const IndexShard& s : shards) m.shards.push_back({s, Placement::Cpu(s.rank)});
  return m;
}

const IndexTensor* CheckpointIndex::Find(const std::string& key) const {
  auto it = tensor_index_.find(key);
  return it == tensor_index_.end() ? nullptr : &tensors[it->second];
}

const IndexFile* CheckpointIndex::FindFile(const std::string& name) const {
  auto it = file_index_.find(name);
  return it == file_index_.end() ? nullptr : &files[it->second];
}

void CheckpointIndex::Reindex() {
  tensor_index_.clear();
  file_index_.clear();
  for (size_t i = 0; i < tensors.size(); ++i) tensor_index_.emplace(tensors[i].key, i);
  for (size_t i = 0; i < files.size(); ++i) file_index_.emplace(files[i].name, i);
}

std::string SerializeIndex(const CheckpointIndex& index) {
  // One line per file and per shard: readable, diffable, and compact for
  // checkpoints with many shards.
  using Ordered = nlohmann::ordered_json;
  std::string out = "{\n";
  absl::StrAppend(&out, " \"format\": ", Ordered(kFormatName).dump(), ",\n");
  absl::StrAppend(&out, " \"version\": ", index.version, ",\n");
  absl::StrAppend(&out, " \"world_size\": ", index.world_size, ",\n");
  absl::StrAppend(&out, " \"generation\": ", Ordered(index.generation).dump(), ",\n");
  absl::StrAppend(&out, " \"checksum\": ",
                  Ordered({{"algorithm", "crc32c"}, {"block_bytes", index.block_bytes}}).dump(), ",\n");
  out += " \"files\": [";
  for (size_t i = 0; i < index.files.size(); ++i) {
    const IndexFile& f = index.files[i];
    absl::StrAppend(&out, i ? "," : "", "\n  ",
                    Ordered({{"name", f.name}, {"rank", f.rank}, {"bytes", f.bytes}, {"header_bytes", f.header_bytes}})
                        .dump());
  }
  out += "\n ],\n \"tensors\": [";
  for (size_t i = 0; i < index.tensors.size(); ++i) {
    const IndexTensor& t = index.tensors[i];
    absl::StrAppend(&out, i ? "," : "", "\n  {\"key\": ", Ordered(t.key).dump(),
                    ", \"kind\": ", t.sharded ? "\"sharded\"" : "\"dense\"",
                    ", \"dtype\": ", Ordered(DtypeName(t.dtype)).dump(), ", \"shape\": ", Ordered(t.shape).dump(),
                    ", \"shards\": [");
    for (size_t k = 0; k < t.shards.size(); ++k) {
      const IndexShard& s = t.shards[k];
      absl::StrAppend(&out, k ? "," : "", "\n   ",
                      Ordered({{"offsets", s.offsets},
                               {"sizes", s.sizes},
                               {"rank", s.rank},
                               {"file", s.file},
                               {"entry", s.entry},
                               {"byte_range", {s.begin, s.end}},
                               {"crc32c", EncodeCrcHex(s.block_crcs)}})
                          .dump());
    }
    out += "]}";
  }
  out += "\n ]\n}\n";
  return out;
}

absl::StatusOr<CheckpointIndex> DecodeIndex(const std::string& json, const std::string& display_name) {
  Json doc = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return Bad(display_name, "not a JSON object (corrupt or truncated)");
  CheckpointIndex index;
  try {
    auto format = AsString(Field(doc, "format"), "format");
    if (!format.ok() || *format != kFormatName) return Bad(display_name, "not a shardlight checkpoint index");
    auto version = AsInt64(Field(doc, "version"), "version", 1);
    if (!version.ok()) return Bad(display_name, std::string(version.status().message()));
    // The version is checked before anything else a newer writer may change.
    if (*version > kFormatVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint index ", Quote(display_name), ": written in format version ", *version,
          ", newer than the version ", kFormatVersion, " this reader understands; upgrade shardlight to load it"));
    }
    index.version = *version;
    auto world = AsInt64(Field(doc, "world_size"), "world_size", 1, kMaxWorldSize);
    if (!world.ok()) return Bad(display_name, std::string(world.status().message()));
    index.world_size = static_cast<int>(*world);
    auto generation = AsString(Field(doc, "generation"), "generation");
    if (!generation.ok()) return Bad(display_name, std::string(generation.status().message()));
    index.generation = *generation;
    const Json* checksum = Field(doc, "checksum");
    auto algorithm = AsString(checksum ? Field(*checksum, "algorithm") : nullptr, "checksum.algorithm");
    if (!algorithm.ok() || *algorithm != "crc32c") return Bad(display_name, "checksum.algorithm is not \"crc32c\"");
    auto block = AsInt64(checksum ? Field(*checksum, "block_bytes") : nullptr, "checksum.block_bytes", kMinBlockBytes,
                         kMaxBlockBytes);
    if (!block.ok()) return Bad(display_name, std::string(block.status().message()));
    index.block_bytes = *block;

    const Json* files = Field(doc, "files");
    if (files == nullptr || !files->is_array()) return Bad(display_name, "files is not an array");
    for (size_t i = 0; i < files->size(); ++i) {
      const Json& f = (*files)[i];
      const std::string what = absl::StrCat("files[", i, "]");
      IndexFile file;
      auto name = AsString(Field(f, "name"), what + " name");
      auto rank = AsInt64(Field(f, "rank"), what + " rank", 0, kMaxWorldSize);
      auto bytes = AsInt64(Field(f, "bytes"), what + " bytes");
      auto header = AsInt64(Field(f, "header_bytes"), what + " header_bytes");
      for (const absl::Status& s : {name.status(), rank.status(), bytes.status(), header.status()}) {
        if (!s.ok()) return Bad(display_name, std::string(s.message()));
      }
      file.name = *name;
      file.rank = static_cast<int>(*rank);
      file.bytes = *bytes;
      file.header_bytes = *header;
      index.files.push_back(std::move(file));
    }

    const Json* tensors = Field(doc, "tensors");
    if (tensors == nullptr || !tensors->is_array()) return Bad(display_name, "tensors is not an array");
    for (size_t i = 0; i < tensors->size(); ++i) {
      const Json& t = (*tensors)[i];
      IndexTensor tensor;
      auto key = AsString(Field(t, "key"), absl::StrCat("tensors[", i, "] key"));
      if (!key.ok()) return Bad(display_name, std::string(key.status().message()));
      tensor.key = *key;
      auto kind = AsString(Field(t, "kind"), "kind");
      if (!kind.ok() || (*kind != "dense" && *kind != "sharded")) {
        return BadKey(display_name, tensor.key, "kind is not \"dense\" or \"sharded\"");
      }
      tensor.sharded = *kind == "sharded";
      auto dtype_name = AsString(Field(t, "dtype"), "dtype");
      if (!dtype_name.ok()) return BadKey(display_name, tensor.key, std::string(dtype_name.status().message()));
      const auto dtype = DtypeFromName(*dtype_name);
      if (!dtype) return BadKey(display_name, tensor.key, absl::StrCat("unknown dtype ", Quote(*dtype_name)));
      tensor.dtype = *dtype;
      auto shape = AsInt64Array(Field(t, "shape"), "shape", kMaxDims);
      if (!shape.ok()) return BadKey(display_name, tensor.key, std::string(shape.status().message()));
      tensor.shape = *shape;
      const Json* shards = Field(t, "shards");
      if (shards == nullptr || !shards->is_array()) return BadKey(display_name, tensor.key, "shards is not an array");
      for (size_t k = 0; k < shards->size(); ++k) {
        auto shard = DecodeShard((*shards)[k], absl::StrCat("shard ", k));
        if (!shard.ok()) return BadKey(display_name, tensor.key, std::string(shard.status().message()));
        tensor.shards.push_back(*std::move(shard));
      }
      index.tensors.push_back(std::move(tensor));
    }
  } catch (const nlohmann::json::exception& e) {
    return Bad(display_name, absl::StrCat("malformed: ", e.what()));
  }
  index.Reindex();
  return index;
}

absl::StatusOr<CheckpointIndex> ParseIndex(const std::string& json, const std::string& display_name) {
  auto index = DecodeIndex(json, display_name);
  if (!index.ok()) return index.status();
  absl::Status s = ValidateIndex(*index, display_name);
  if (!s.ok()) return s;
  return index;
}

absl::Status ValidateIndex(const CheckpointIndex& index, const std::string& display_name) {
  if (index.version < 1 || index.version > kFormatVersion) {
    return Bad(display_name, absl::StrCat("unsupported format version ", index.version));
  }
  if (index.block_bytes < kMinBlockBytes || index.block_bytes > kMaxBlockBytes) {
    return Bad(display_name, absl::StrCat("checksum block size ", index.block_bytes, " is outside [", kMinBlockBytes,
                                          ", ", kMaxBlockBytes, "]"));
  }
  std::unordered_map<std::string, const IndexFile*> files;
  for (const IndexFile& f : index.files) {
    absl::Status s = ValidateFileName(f.name);
    if (!s.ok()) return Bad(display_name, std::string(s.message()));
    if (!files.emplace(f.name, &f).second) return Bad(display_name, absl::StrCat("file ", Quote(f.name), " is listed twice"));
    if (f.rank >= index.world_size) {
      return Bad(display_name, absl::StrCat("file ", Quote(f.name), " has rank ", f.rank, " >= world size ", index.world_size));
    }
    if (f.bytes < 8 || f.header_bytes > f.bytes - 8) {
      return Bad(display_name, absl::StrCat("file ", Quote(f.name), ": header of ", f.header_bytes,
                                            " bytes does not fit its ", f.bytes, " bytes"));
    }
  }
  struct Range {
    const IndexFile* file;
    int64_t begin, end;
    const std::string* key;
    size_t shard;
  };
  std::vector<Range> ranges;
  std::unordered_map<std::string, int> keys;
  for (const IndexTensor& t : index.tensors) {
    absl::Status s = ValidateKey(t.key);
    if (!s.ok()) return Bad(display_name, std::string(s.message()));
    if (!keys.emplace(t.key, 0).second) return BadKey(display_name, t.key, "listed twice");
    auto total = CheckedNumElements(t.shape);
    if (!total.ok()) return BadKey(display_name, t.key, std::string(total.status().message()));
    const int64_t elem = DtypeBytes(t.dtype);
    if (t.sharded && !IsSupportedDtype(t.dtype)) {
      return BadKey(display_name, t.key, absl::StrCat("dtype ", DtypeName(t.dtype), " cannot be sharded"));
    }
    if (!t.sharded) {
      if (t.shards.size() != 1 || t.shards[0].offsets != std::vector<int64_t>(t.shape.size(), 0) ||
          t.shards[0].sizes != t.shape) {
        return BadKey(display_name, t.key, "a dense tensor needs exactly one shard covering it");
      }
    }
    for (size_t k = 0; k < t.shards.size(); ++k) {
      const IndexShard& sh = t.shards[k];
      const std::string what = absl::StrCat("shard ", k);
      if (sh.offsets.size() != t.shape.size() || sh.sizes.size() != t.shape.size()) {
        return BadKey(display_name, t.key, absl::StrCat(what, " has the wrong number of dims for shape ",
                                                        ShapeToString(t.shape)));
      }
      if (sh.rank >= index.world_size) {
        return BadKey(display_name, t.key, absl::StrCat(what, " is on rank ", sh.rank, " >= world size ", index.world_size));
      }
      auto it = files.find(sh.file);
      if (it == files.end()) {
        return BadKey(display_name, t.key, absl::StrCat(what, " names file ", Quote(sh.file), ", which is not in the file list"));
      }
      const IndexFile& f = *it->second;
      auto n = CheckedNumElements(sh.sizes);
      if (!n.ok()) return BadKey(display_name, t.key, absl::StrCat(what, ": ", n.status().message()));
      if (*n > INT64_MAX / elem) return BadKey(display_name, t.key, absl::StrCat(what, " is too large"));
      const int64_t want = *n * elem;
      if (sh.begin < 8 + f.header_bytes || sh.begin > sh.end || sh.end > f.bytes) {
        return BadKey(display_name, t.key,
                      absl::StrCat(what, " byte_range [", sh.begin, ", ", sh.end, ") is out of range for file ",
                                   Quote(f.name), " (data in [", 8 + f.header_bytes, ", ", f.bytes, "))"));
      }
      if (sh.end - sh.begin != want) {
        return BadKey(display_name, t.key, absl::StrCat(what, " byte_range holds ", sh.end - sh.begin, " bytes; sizes ",
                                                        ShapeToString(sh.sizes), " need ", want));
      }
      if (static_cast<int64_t>(sh.block_crcs.size()) != NumBlocks(want, index.block_bytes)) {
        return BadKey(display_name, t.key, absl::StrCat(what, " has ", sh.block_crcs.size(), " checksums; its ", want,
                                                        " bytes need ", NumBlocks(want, index.block_bytes)));
      }
      if (sh.entry.empty()) return BadKey(display_name, t.key, absl::StrCat(what, " has an empty entry name"));
      if (want > 0) ranges.push_back({&f, sh.begin, sh.end, &t.key, k});
    }
    if (t.sharded) {
      ShardedTensorMetadata m = t.Metadata();
      s = m.Validate();
      if (!s.ok()) {
        return BadKey(display_name, t.key, absl::StrCat("the shards do not tile the tensor: ", s.message()));
      }
    }
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.file != b.file ? a.file->name < b.file->name : a.begin < b.begin;
  });
  for (size_t i = 1; i < ranges.size(); ++i) {
    const Range& a = ranges[i - 1];
    const Range& b = ranges[i];
    if (a.file == b.file && a.end > b.begin) {
      return BadKey(display_name, *b.key,
                    absl::StrCat("shard ", b.shard, " bytes [", b.begin, ", ", b.end, ") overlap key ", Quote(*a.key),
                                 " shard ", a.shard, " bytes [", a.begin, ", ", a.end, ") in file ", Quote(a.file->name)));
    }
  }
  return absl::OkStatus();
}

}  // namespace shardlight::sharded::checkpoint
