// DecodeIndex: index.json to a CheckpointIndex through ParseJsonStream, one
// file or shard record at a time, so a hostile index costs memory in
// proportion to what it describes, not to a DOM of its text. The trailing
// index_crc32c member (FORMAT.md) is checked when present.
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/format/crc32c.h"
#include "sharded/checkpoint/format/dtype_names.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/format/json_fields.h"
#include "sharded/checkpoint/format/json_stream.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {
namespace {

constexpr char kFormatName[] = "shardlight.checkpoint";
constexpr size_t kMaxDims = 64;
constexpr int kMaxWorldSize = 1 << 20;
constexpr int kMaxIndexDepth = 8;

using Json = nlohmann::json;

absl::Status Bad(const std::string& index_name, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("checkpoint index ", Quote(index_name), ": ", what));
}

absl::Status BadKey(const std::string& index_name, const std::string& key, const std::string& what) {
  return Bad(index_name, absl::StrCat("key ", Quote(key), ": ", what));
}

bool IsOneOf(const std::string& key, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (key == n) return true;
  }
  return false;
}

// The members each object of an index may hold; the rest are skipped unread.
bool KeepMember(const std::string& path, const std::string& key) {
  if (path.empty()) {
    return IsOneOf(key, {"format", "version", "world_size", "generation", "run", "checksum", "files", "tensors",
                         kIndexChecksumField});
  }
  if (path == "/checksum") return IsOneOf(key, {"algorithm", "block_bytes"});
  if (path == "/files/[]") return IsOneOf(key, {"name", "rank", "bytes", "header_bytes"});
  if (path == "/tensors/[]") return IsOneOf(key, {"key", "kind", "dtype", "shape", "shards"});
  if (path == "/tensors/[]/shards/[]") {
    return IsOneOf(key, {"offsets", "sizes", "rank", "file", "entry", "byte_range", "crc32c"});
  }
  return false;
}

absl::StatusOr<IndexFile> DecodeFile(const Json& f, const std::string& what) {
  IndexFile file;
  auto name = AsString(Field(f, "name"), what + " name");
  auto rank = AsInt64(Field(f, "rank"), what + " rank", 0, kMaxWorldSize);
  auto bytes = AsInt64(Field(f, "bytes"), what + " bytes");
  auto header = AsInt64(Field(f, "header_bytes"), what + " header_bytes");
  for (const absl::Status& s : {name.status(), rank.status(), bytes.status(), header.status()}) {
    if (!s.ok()) return s;
  }
  file.name = *name;
  file.rank = static_cast<int>(*rank);
  file.bytes = *bytes;
  file.header_bytes = *header;
  return file;
}

absl::StatusOr<IndexShard> DecodeShard(const Json& j, const std::string& what) {
  IndexShard s;
  auto offsets = AsInt64Array(Field(j, "offsets"), what + " offsets", kMaxDims);
  if (!offsets.ok()) return offsets.status();
  s.offsets = *std::move(offsets);
  auto sizes = AsInt64Array(Field(j, "sizes"), what + " sizes", kMaxDims);
  if (!sizes.ok()) return sizes.status();
  s.sizes = *std::move(sizes);
  auto rank = AsInt64(Field(j, "rank"), what + " rank", 0, kMaxWorldSize);
  if (!rank.ok()) return rank.status();
  s.rank = static_cast<int>(*rank);
  auto file = AsString(Field(j, "file"), what + " file");
  if (!file.ok()) return file.status();
  s.file = *std::move(file);
  auto entry = AsString(Field(j, "entry"), what + " entry");
  if (!entry.ok()) return entry.status();
  s.entry = *std::move(entry);
  SL_ASSIGN_OR_RETURN(auto range, AsInt64Array(Field(j, "byte_range"), what + " byte_range", 2));
  if (range.size() != 2) return absl::InvalidArgumentError(what + " byte_range is not [begin, end]");
  s.begin = range[0];
  s.end = range[1];
  SL_ASSIGN_OR_RETURN(auto crcs, AsString(Field(j, "crc32c"), what + " crc32c"));
  if (!DecodeCrcHex(crcs, &s.block_crcs)) {
    return absl::InvalidArgumentError(what + " crc32c is not a string of 8-digit lowercase hex checksums");
  }
  return s;
}

// A tensor's own fields; its shards were decoded as records before it ended.
absl::Status DecodeTensor(const Json& t, size_t i, IndexTensor& tensor, const std::string& index_name) {
  auto key = AsString(Field(t, "key"), absl::StrCat("tensors[", i, "] key"));
  if (!key.ok()) return Bad(index_name, std::string(key.status().message()));
  tensor.key = *key;
  auto kind = AsString(Field(t, "kind"), "kind");
  if (!kind.ok() || (*kind != "dense" && *kind != "sharded")) {
    return BadKey(index_name, tensor.key, "kind is not \"dense\" or \"sharded\"");
  }
  tensor.sharded = *kind == "sharded";
  auto dtype_name = AsString(Field(t, "dtype"), "dtype");
  if (!dtype_name.ok()) return BadKey(index_name, tensor.key, std::string(dtype_name.status().message()));
  const auto dtype = DtypeFromName(*dtype_name);
  if (!dtype) return BadKey(index_name, tensor.key, absl::StrCat("unknown dtype ", Quote(*dtype_name)));
  tensor.dtype = *dtype;
  auto shape = AsInt64Array(Field(t, "shape"), "shape", kMaxDims);
  if (!shape.ok()) return BadKey(index_name, tensor.key, std::string(shape.status().message()));
  tensor.shape = *shape;
  const Json* shards = Field(t, "shards");
  if (shards == nullptr || !shards->is_array()) return BadKey(index_name, tensor.key, "shards is not an array");
  // Shard objects were records; anything left is not a shard.
  if (!shards->empty()) return BadKey(index_name, tensor.key, "a shard is not an object");
  return absl::OkStatus();
}

// The optional "run" member: an array of "name=value" strings (arrays are
// kept only up to kMaxDims long, so a hostile one costs nothing).
absl::StatusOr<RunRecord> DecodeRun(const Json* run) {
  RunRecord record;
  if (run == nullptr) return record;
  if (!run->is_array()) return absl::InvalidArgumentError("run is not an array of \"name=value\" strings");
  for (const Json& member : *run) {
    SL_ASSIGN_OR_RETURN(const std::string text, AsString(&member, "an element of run"));
    const size_t eq = text.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("run member ", Quote(text), " is not \"name=value\""));
    }
    if (!record.emplace(text.substr(0, eq), text.substr(eq + 1)).second) {
      return absl::InvalidArgumentError(absl::StrCat("run names ", Quote(text.substr(0, eq)), " twice"));
    }
  }
  SL_RETURN_IF_ERROR(ValidateRunRecord(record));
  return record;
}

}  // namespace

absl::Status CheckIndexChecksum(const std::string& json, const std::string& index_name) {
  const std::string head = absl::StrCat("\n \"", kIndexChecksumField, "\": \"");
  const std::string tail = "\"\n}\n";
  const size_t line = json.size() >= head.size() + 8 + tail.size() ? json.size() - head.size() - 8 - tail.size() : 0;
  std::vector<uint32_t> stored;
  if (line == 0 || json.compare(line, head.size(), head) != 0 || json.compare(json.size() - tail.size(), tail.size(), tail) != 0 ||
      !DecodeCrcHex(json.substr(line + head.size(), 8), &stored)) {
    return Bad(index_name, absl::StrCat(kIndexChecksumField, " is not the last line, written as  \"",
                                        kIndexChecksumField, "\": \"<8 lowercase hex digits>\""));
  }
  const uint32_t actual = Crc32c(json.data(), line + 1);
  if (actual != stored[0]) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint index ", Quote(index_name), ": checksum mismatch: its content has CRC32C ",
        EncodeCrcHex({actual}), ", its ", kIndexChecksumField, " says ", EncodeCrcHex(stored),
        " (the index was changed or damaged after the save)"));
  }
  return absl::OkStatus();
}

std::string SealIndex(std::string unsealed) {
  // `unsealed` ends "\n ]\n}\n"; the checksum line goes before the brace.
  unsealed.resize(unsealed.size() - 2);
  unsealed.back() = ',';
  unsealed.push_back('\n');
  const std::string crc = EncodeCrcHex({Crc32c(unsealed.data(), unsealed.size())});
  return absl::StrCat(unsealed, " \"", kIndexChecksumField, "\": \"", crc, "\"\n}\n");
}

std::string UnsealIndex(std::string sealed) {
  const std::string head = absl::StrCat(",\n \"", kIndexChecksumField, "\": \"");
  const size_t at = sealed.rfind(head);
  if (at == std::string::npos) return sealed;
  sealed.resize(at);
  sealed += "\n}\n";
  return sealed;
}

absl::StatusOr<CheckpointIndex> DecodeIndex(const std::string& json, const std::string& display_name,
                                            bool check_checksum) {
  CheckpointIndex index;
  std::vector<IndexShard> pending;  // the shards of the tensor being parsed
  absl::Status first_error;         // reported after the version check
  auto note = [&](absl::Status s) {
    if (first_error.ok()) first_error = std::move(s);
  };
  JsonStreamSpec spec;
  spec.max_depth = kMaxIndexDepth;
  spec.max_array_length = kMaxDims;
  spec.keep_member = KeepMember;
  spec.is_record = [](const std::string& path, int) {
    return path == "/files/[]" || path == "/tensors/[]" || path == "/tensors/[]/shards/[]";
  };
  std::string shard_error;  // the first bad shard of the tensor being parsed
  spec.on_record = [&](const std::string& path, const std::string&, Json&& record) -> absl::Status {
    if (!first_error.ok()) return absl::OkStatus();  // the rest is parsed, not decoded
    if (path == "/files/[]") {
      auto file = DecodeFile(record, absl::StrCat("files[", index.files.size(), "]"));
      if (file.ok()) {
        index.files.push_back(*std::move(file));
      } else {
        note(Bad(display_name, std::string(file.status().message())));
      }
    } else if (path == "/tensors/[]/shards/[]") {
      // The tensor's key may come after its shards: errors wait for it.
      auto shard = DecodeShard(record, absl::StrCat("shard ", pending.size()));
      if (shard.ok()) {
        pending.push_back(*std::move(shard));
      } else if (shard_error.empty()) {
        shard_error = std::string(shard.status().message());
      }
    } else {
      IndexTensor tensor;
      absl::Status s = DecodeTensor(record, index.tensors.size(), tensor, display_name);
      if (s.ok() && !shard_error.empty()) s = BadKey(display_name, tensor.key, shard_error);
      if (s.ok()) {
        tensor.shards = std::move(pending);
        index.tensors.push_back(std::move(tensor));
      } else {
        note(s);
      }
      pending.clear();
      shard_error.clear();
    }
    return absl::OkStatus();
  };
  SL_ASSIGN_OR_RETURN(auto parsed, ParseJsonStream(json, spec, absl::StrCat("checkpoint index ", Quote(display_name))));
  const Json& doc = parsed;
  if (!doc.is_object()) return Bad(display_name, "not a JSON object (corrupt or truncated)");
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
  // Before the records' errors: a flipped character is reported as such.
  index.sealed = Field(doc, kIndexChecksumField) != nullptr;
  if (index.sealed && check_checksum) SL_RETURN_IF_ERROR(CheckIndexChecksum(json, display_name));
  if (!first_error.ok()) return first_error;
  index.version = *version;
  auto world = AsInt64(Field(doc, "world_size"), "world_size", 1, kMaxWorldSize);
  if (!world.ok()) return Bad(display_name, std::string(world.status().message()));
  index.world_size = static_cast<int>(*world);
  auto generation = AsString(Field(doc, "generation"), "generation");
  if (!generation.ok()) return Bad(display_name, std::string(generation.status().message()));
  index.generation = *generation;
  auto run = DecodeRun(Field(doc, "run"));
  if (!run.ok()) return Bad(display_name, std::string(run.status().message()));
  index.run = *std::move(run);
  const Json* checksum = Field(doc, "checksum");
  auto algorithm = AsString(checksum ? Field(*checksum, "algorithm") : nullptr, "checksum.algorithm");
  if (!algorithm.ok() || *algorithm != "crc32c") return Bad(display_name, "checksum.algorithm is not \"crc32c\"");
  auto block = AsInt64(checksum ? Field(*checksum, "block_bytes") : nullptr, "checksum.block_bytes", kMinBlockBytes,
                       kMaxBlockBytes);
  if (!block.ok()) return Bad(display_name, std::string(block.status().message()));
  index.block_bytes = *block;
  const Json* files = Field(doc, "files");
  if (files == nullptr || !files->is_array()) return Bad(display_name, "files is not an array");
  if (!files->empty()) return Bad(display_name, "an element of files is not an object");
  const Json* tensors = Field(doc, "tensors");
  if (tensors == nullptr || !tensors->is_array()) return Bad(display_name, "tensors is not an array");
  if (!tensors->empty()) return Bad(display_name, "an element of tensors is not an object");
  index.Reindex();
  return index;
}

}  // namespace shardlight::sharded::checkpoint
