#include "sharded/checkpoint/format/index.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "sharded/checkpoint/format/dtype_names.h"
#include "sharded/checkpoint/format/file_names.h"
#include "sharded/checkpoint/format/index_naming.h"
#include "sharded/checkpoint/format/json_stream.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {
namespace {

constexpr char kFormatName[] = "shardlight.checkpoint";

}  // namespace

void AppendCrcHex(absl::Span<const uint32_t> crcs, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  const size_t at = out->size();
  out->resize(at + crcs.size() * 8);
  char* p = out->data() + at;
  for (uint32_t c : crcs) {
    for (int shift = 28; shift >= 0; shift -= 4) *p++ = kHex[(c >> shift) & 0xF];
  }
}

std::string EncodeCrcHex(absl::Span<const uint32_t> crcs) {
  std::string out;
  AppendCrcHex(crcs, &out);
  return out;
}

namespace {

template <typename Crcs>
bool DecodeCrcs(absl::string_view hex, Crcs* crcs) {
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

}  // namespace

bool DecodeCrcHex(absl::string_view hex, std::vector<uint32_t>* crcs) { return DecodeCrcs(hex, crcs); }
bool DecodeCrcHex(absl::string_view hex, BlockCrcs* crcs) { return DecodeCrcs(hex, crcs); }

namespace {

absl::Status Bad(const std::string& index_name, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("checkpoint index ", Quote(index_name), ": ", what));
}

absl::Status BadKey(const std::string& index_name, const std::string& key, const std::string& what) {
  return Bad(index_name, absl::StrCat("key ", Quote(key), ": ", what));
}

// Whether the shards of `t` (of `total` elements, each shard's dims as
// many as the tensor's) certainly tile it: in bounds, pairwise disjoint and
// as many elements as the tensor. A quick yes for a few shards, checked in
// place; false means "not sure": ShardedTensorMetadata::Validate then
// decides, and says what is wrong.
bool SurelyTiles(const IndexTensor& t, int64_t total) {
  constexpr size_t kFewShards = 16;  // 120 pairs at most: cheaper than building the metadata
  constexpr size_t kFewDims = 8;  // within what Validate accepts
  const size_t dims = t.shape.size();
  if (t.shards.empty() || t.shards.size() > kFewShards || dims > kFewDims) return false;
  int64_t covered = 0;
  for (const IndexShard& s : t.shards) {
    if (s.rank < 0 || s.offsets.size() != dims || s.sizes.size() != dims) return false;
    for (size_t d = 0; d < dims; ++d) {
      if (s.offsets[d] < 0 || s.sizes[d] < 0 || s.offsets[d] > t.shape[d] || s.sizes[d] > t.shape[d] - s.offsets[d]) {
        return false;
      }
    }
    const int64_t n = s.NumElements();  // in bounds: at most `total`
    if (n > total - covered) return false;
    covered += n;
  }
  if (covered != total) return false;
  for (size_t i = 0; i < t.shards.size(); ++i) {
    const IndexShard& a = t.shards[i];
    if (a.NumElements() == 0) continue;
    for (size_t j = i + 1; j < t.shards.size(); ++j) {
      const IndexShard& b = t.shards[j];
      if (b.NumElements() == 0) continue;
      bool apart = false;
      for (size_t d = 0; d < dims && !apart; ++d) {
        apart = a.offsets[d] + a.sizes[d] <= b.offsets[d] || b.offsets[d] + b.sizes[d] <= a.offsets[d];
      }
      if (!apart) return false;
    }
  }
  return true;
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

const IndexValue* CheckpointIndex::FindValue(const std::string& key) const {
  auto it = value_index_.find(key);
  return it == value_index_.end() ? nullptr : &values[it->second];
}

const IndexFile* CheckpointIndex::FindFile(const std::string& name) const {
  auto it = file_index_.find(name);
  return it == file_index_.end() ? nullptr : &files[it->second];
}

const IndexFile* CheckpointIndex::FileOf(const IndexShard& shard) const {
  if (shard.named_file()) return FindFile(*shard.named_file());
  const size_t r = static_cast<size_t>(shard.rank);
  if (shard.rank >= 0 && r < file_of_rank_.size()) {
    return file_of_rank_[r] != kNoFile ? &files[file_of_rank_[r]] : nullptr;
  }
  return shard.rank >= 0 ? FindFile(DataFileName(generation, shard.rank)) : nullptr;  // (not in a save's index)
}

void CheckpointIndex::Reindex() {
  tensor_index_.clear();
  file_index_.clear();
  file_of_rank_.clear();
  tensor_index_.reserve(tensors.size());
  file_index_.reserve(files.size());
  for (size_t i = 0; i < tensors.size(); ++i) tensor_index_.emplace(tensors[i].key, i);
  value_index_.clear();
  for (size_t i = 0; i < values.size(); ++i) value_index_.emplace(values[i].key, i);
  ShardNamer namer(generation);
  for (size_t i = 0; i < files.size(); ++i) {
    file_index_.emplace(files[i].name, i);
    // A file named otherwise holds no shard by derivation. Ranks are below
    // the number of files in any index a save writes (one file per rank):
    // the table is no larger than the list, whatever a hostile index says.
    const int rank = files[i].rank;
    if (rank < 0 || static_cast<size_t>(rank) >= files.size() || !namer.IsRankFile(files[i].name, rank)) continue;
    if (file_of_rank_.empty()) file_of_rank_.assign(files.size(), kNoFile);
    file_of_rank_[static_cast<size_t>(rank)] = i;
  }
}

const IndexShard::Stated& IndexShard::NoneStated() {
  static const Stated* const none = new Stated();
  return *none;
}

IndexShard::Stated& IndexShard::MutableStated() {
  if (!stated_.p) stated_.p = std::make_unique<Stated>();
  return *stated_.p;
}

// A setter that leaves nothing stated frees the out-of-line part: a shard
// whose names turn out derived holds no memory for them.
void IndexShard::set_named_file(std::optional<std::string> name) {
  if (!name && !stated_.p) return;
  MutableStated().file = std::move(name);
  DropIfEmpty();
}

void IndexShard::set_named_entry(std::optional<std::string> name) {
  if (!name && !stated_.p) return;
  MutableStated().entry = std::move(name);
  DropIfEmpty();
}

void IndexShard::set_dim_order(std::vector<int64_t> order) {
  if (order.empty() && !stated_.p) return;
  MutableStated().dim_order = std::move(order);
  DropIfEmpty();
}

void IndexShard::DropIfEmpty() {
  if (stated_.p && !stated_.p->file && !stated_.p->entry && stated_.p->dim_order.empty()) stated_.p.reset();
}

std::string ShardFileName(const CheckpointIndex& index, const IndexShard& shard) {
  return shard.named_file() ? *shard.named_file() : DataFileName(index.generation, shard.rank);
}

absl::string_view ShardEntryName(const IndexTensor& tensor, size_t k, std::string* scratch) {
  const IndexShard& s = tensor.shards[k];
  if (s.named_entry()) return *s.named_entry();
  if (!tensor.sharded) return tensor.key;
  // Built by hand: this runs for every shard of a file whose header is
  // checked, and StrAppend's sizing pass showed in counts of a load.
  char digits[absl::numbers_internal::kFastToBufferSize];
  const char* digits_end = absl::numbers_internal::FastIntToBuffer(static_cast<uint64_t>(k), digits);
  scratch->assign(tensor.key);
  scratch->append("/shard-", 7);
  scratch->append(digits, static_cast<size_t>(digits_end - digits));
  return *scratch;
}

std::string ShardEntryName(const IndexTensor& tensor, size_t k) {
  std::string scratch;
  return std::string(ShardEntryName(tensor, k, &scratch));
}

bool IsDerivedEntryName(absl::string_view entry, absl::string_view key, bool sharded, size_t k) {
  if (!sharded) return entry == key;
  return absl::ConsumePrefix(&entry, key) && absl::ConsumePrefix(&entry, "/shard-") &&
         entry == absl::AlphaNum(k).Piece();
}

ShardNamer::ShardNamer(absl::string_view generation)
    : generation_(generation),
      plain_(std::all_of(generation.begin(), generation.end(),
                         [](char c) { return c >= 0x20 && c <= 0x7e && c != '"' && c != '\\'; })) {}

absl::string_view ShardNamer::RankDigits(int rank, char (&buffer)[kRankDigitsBuffer]) {
  // DataFileName's "%05d" of a non-negative rank, without a format call.
  char digits[absl::numbers_internal::kFastToBufferSize];
  const size_t n = static_cast<size_t>(absl::numbers_internal::FastIntToBuffer(rank, digits) - digits);
  const size_t pad = n < 5 ? 5 - n : 0;
  std::memset(buffer, '0', pad);
  std::memcpy(buffer + pad, digits, n);
  return absl::string_view(buffer, pad + n);
}

const std::string* ShardNamer::KeptRankFile(int rank) const {
  if (!plain_ || generation_.size() != 16 || rank < 0 || rank >= kKeptRanks) return nullptr;
  const size_t r = static_cast<size_t>(rank);
  if (kept_.size() <= r) kept_.resize(r + 1);
  if (kept_[r].empty()) kept_[r] = DataFileName(generation_, rank);
  return &kept_[r];
}

bool ShardNamer::IsRankFile(absl::string_view file, int rank) const {
  if (rank < 0) return false;
  char buffer[kRankDigitsBuffer];
  return absl::ConsumePrefix(&file, "data-") && absl::ConsumePrefix(&file, generation_) &&
         absl::ConsumePrefix(&file, "-r") && absl::ConsumeSuffix(&file, ".safetensors") &&
         file == RankDigits(rank, buffer);
}

void ShardNamer::Name(const IndexTensor& tensor, size_t k, absl::string_view file, absl::string_view entry,
                      IndexShard* shard) const {
  if (IsRankFile(file, shard->rank)) {
    shard->set_named_file(std::nullopt);
  } else {
    shard->set_named_file(std::string(file));
  }
  if (IsDerivedEntryName(entry, tensor.key, tensor.sharded, k)) {
    shard->set_named_entry(std::nullopt);
  } else {
    shard->set_named_entry(std::string(entry));
  }
}

namespace {

void AppendInts(std::string* out, absl::Span<const int64_t> values) {
  out->push_back('[');
  for (size_t i = 0; i < values.size(); ++i) absl::StrAppend(out, i ? "," : "", values[i]);
  out->push_back(']');
}

}  // namespace

std::string SerializeIndex(const CheckpointIndex& index) {
  // One line per file and per shard: readable, diffable, and compact for
  // checkpoints with many shards. Written directly (the spelling nlohmann's
  // dump gives), in time linear in the index.
  std::string out = "{\n \"format\": ";
  size_t shards = 0;
  for (const IndexTensor& t : index.tensors) shards += t.shards.size();
  out.reserve(256 + index.files.size() * 128 + index.tensors.size() * 96 + shards * 192);
  AppendJsonString(&out, kFormatName);
  std::vector<std::string> rank_files;  // each rank's derived file name, quoted
  std::string entry;                    // scratch for derived entry names
  absl::StrAppend(&out, ",\n \"version\": ", index.version, ",\n \"world_size\": ", index.world_size,
                  ",\n \"generation\": ");
  AppendJsonString(&out, index.generation);
  absl::StrAppend(&out, ",\n \"checksum\": {\"algorithm\":\"crc32c\",\"block_bytes\":", index.block_bytes, "},\n");
  if (!index.run.empty()) {
    out += " \"run\": [";
    for (auto it = index.run.begin(); it != index.run.end(); ++it) {
      if (it != index.run.begin()) out += ", ";
      AppendJsonString(&out, absl::StrCat(it->first, "=", it->second));
    }
    out += "],\n";
  }
  if (!index.values.empty()) {
    out += " \"values\": [";
    std::string repr;
    for (size_t i = 0; i < index.values.size(); ++i) {
      out += i ? ",\n  {\"key\": " : "\n  {\"key\": ";
      AppendJsonString(&out, index.values[i].key);
      out += ", \"value\": ";
      repr.clear();
      index.values[i].value.AppendRepr(&repr);
      AppendJsonString(&out, repr);
      out += "}";
    }
    out += "\n ],\n";
  }
  out += " \"files\": [";
  for (size_t i = 0; i < index.files.size(); ++i) {
    const IndexFile& f = index.files[i];
    out += i ? ",\n  {\"name\":" : "\n  {\"name\":";
    AppendJsonString(&out, f.name);
    absl::StrAppend(&out, ",\"rank\":", f.rank, ",\"bytes\":", f.bytes, ",\"header_bytes\":", f.header_bytes, "}");
  }
  out += "\n ],\n \"tensors\": [";
  for (size_t i = 0; i < index.tensors.size(); ++i) {
    const IndexTensor& t = index.tensors[i];
    out += i ? ",\n  {\"key\": " : "\n  {\"key\": ";
    AppendJsonString(&out, t.key);
    out += t.sharded ? ", \"kind\": \"sharded\", \"dtype\": " : ", \"kind\": \"dense\", \"dtype\": ";
    AppendJsonString(&out, DtypeName(t.dtype));
    out += ", \"shape\": ";
    AppendInts(&out, t.shape);
    out += ", \"shards\": [";
    for (size_t k = 0; k < t.shards.size(); ++k) {
      const IndexShard& s = t.shards[k];
      out += k ? ",\n   {\"offsets\":" : "\n   {\"offsets\":";
      AppendInts(&out, s.offsets);
      out += ",\"sizes\":";
      AppendInts(&out, s.sizes);
      absl::StrAppend(&out, ",\"rank\":", s.rank, ",\"file\":");
      if (s.named_file()) {
        AppendJsonString(&out, *s.named_file());
      } else {
        const size_t r = static_cast<size_t>(s.rank);
        if (s.rank >= 0 && r < index.files.size()) {  // a save's ranks: each name spelled once
          if (rank_files.size() <= r) rank_files.resize(index.files.size());
          if (rank_files[r].empty()) AppendJsonString(&rank_files[r], DataFileName(index.generation, s.rank));
          out += rank_files[r];
        } else {
          AppendJsonString(&out, DataFileName(index.generation, s.rank));
        }
      }
      out += ",\"entry\":";
      AppendJsonString(&out, ShardEntryName(t, k, &entry));
      absl::StrAppend(&out, ",\"byte_range\":[", s.begin, ",", s.end, "],\"crc32c\":\"");
      AppendCrcHex(s.block_crcs, &out);
      out += "\"}";
    }
    out += "]}";
  }
  out += "\n ]\n}\n";
  return SealIndex(std::move(out));
}

absl::StatusOr<CheckpointIndex> ParseIndex(const std::string& json, const std::string& display_name) {
  auto index = DecodeIndex(json, display_name);
  SL_RETURN_IF_ERROR(index.status());
  SL_RETURN_IF_ERROR(ValidateIndex(*index, display_name));
  return index;
}

absl::Status ValidateIndexValues(const CheckpointIndex& index, const std::string& display_name) {
  absl::flat_hash_set<absl::string_view> keys;
  keys.reserve(index.values.size());
  int64_t text = 0;
  for (const IndexValue& v : index.values) {
    absl::Status s = ValidateKey(v.key);
    if (!s.ok()) return Bad(display_name, std::string(s.message()));
    if (!keys.insert(v.key).second) return BadKey(display_name, v.key, "value listed twice");
    s = v.value.Validate();
    if (!s.ok()) return BadKey(display_name, v.key, std::string(s.message()));
    text += static_cast<int64_t>(v.value.Repr().size());
  }
  if (text > kMaxValuesBytes) {
    return Bad(display_name, absl::StrCat("the values' text holds ", text, " bytes, more than ", kMaxValuesBytes,
                                          " (store large state as a tensor)"));
  }
  for (const IndexTensor& t : index.tensors) {
    if (keys.contains(t.key)) return BadKey(display_name, t.key, "is both a tensor and a value");
  }
  return absl::OkStatus();
}

absl::Status ValidateIndex(const CheckpointIndex& index, const std::string& display_name) {
  if (index.version < 1 || index.version > kFormatVersion) {
    return Bad(display_name, absl::StrCat("unsupported format version ", index.version));
  }
  if (index.block_bytes < kMinBlockBytes || index.block_bytes > kMaxBlockBytes) {
    return Bad(display_name, absl::StrCat("checksum block size ", index.block_bytes, " is outside [", kMinBlockBytes,
                                          ", ", kMaxBlockBytes, "]"));
  }
  if (absl::Status s = ValidateRunRecord(index.run); !s.ok()) return Bad(display_name, std::string(s.message()));
  SL_RETURN_IF_ERROR(ValidateIndexValues(index, display_name));
  // Views into `index`, which outlives them: no key or name is copied.
  absl::flat_hash_map<absl::string_view, const IndexFile*> files;
  files.reserve(index.files.size());
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
  // Names (FORMAT.md): the files' here, each shard's where it is checked.
  SL_RETURN_IF_ERROR(internal::ValidateFileNaming(index, display_name));
  struct Range {
    size_t file;  // position in index.files
    int64_t begin, end;
    const std::string* key;
    size_t shard;
  };
  std::vector<Range> ranges;  // of the non-empty shards
  size_t shards = 0;
  for (const IndexTensor& t : index.tensors) shards += t.shards.size();
  ranges.reserve(shards);
  absl::flat_hash_set<absl::string_view> keys;
  keys.reserve(index.tensors.size());
  // Each rank's file as this format names it (a shard without named_file is
  // there): positions in index.files, found as ranks are met.
  std::vector<const IndexFile*> rank_file;
  std::vector<bool> rank_file_known;
  // (No larger than the file list: a rank beyond it, in no index a save
  // writes, is looked up each time.)
  auto file_of_rank = [&](int rank) -> const IndexFile* {
    const size_t r = static_cast<size_t>(rank);
    if (r >= index.files.size()) {
      auto it = files.find(DataFileName(index.generation, rank));
      return it == files.end() ? nullptr : it->second;
    }
    if (rank_file.empty()) {
      rank_file.assign(index.files.size(), nullptr);
      rank_file_known.assign(index.files.size(), false);
    }
    if (!rank_file_known[r]) {
      auto it = files.find(DataFileName(index.generation, rank));
      rank_file[r] = it == files.end() ? nullptr : it->second;
      rank_file_known[r] = true;
    }
    return rank_file[r];
  };
  for (const IndexTensor& t : index.tensors) {
    absl::Status s = ValidateKey(t.key);
    if (!s.ok()) return Bad(display_name, std::string(s.message()));
    if (!keys.insert(t.key).second) return BadKey(display_name, t.key, "listed twice");
    auto total = CheckedNumElements(t.shape);
    if (!total.ok()) return BadKey(display_name, t.key, std::string(total.status().message()));
    const int64_t elem = DtypeBytes(t.dtype);
    if (t.sharded && !IsSupportedDtype(t.dtype)) {
      return BadKey(display_name, t.key, absl::StrCat("dtype ", DtypeName(t.dtype), " cannot be sharded"));
    }
    if (!t.sharded) {
      if (t.shards.size() != 1 || t.shards[0].offsets.size() != t.shape.size() ||
          std::any_of(t.shards[0].offsets.begin(), t.shards[0].offsets.end(), [](int64_t o) { return o != 0; }) ||
          !SameDims(t.shards[0].sizes, t.shape)) {
        return BadKey(display_name, t.key, "a dense tensor needs exactly one shard covering it");
      }
    }
    for (size_t k = 0; k < t.shards.size(); ++k) {
      const IndexShard& sh = t.shards[k];
      auto what = [k] { return absl::StrCat("shard ", k); };  // built only for an error
      if (sh.offsets.size() != t.shape.size() || sh.sizes.size() != t.shape.size()) {
        return BadKey(display_name, t.key, absl::StrCat(what(), " has the wrong number of dims for shape ",
                                                        ShapeToString(t.shape)));
      }
      if (sh.rank >= index.world_size) {
        return BadKey(display_name, t.key, absl::StrCat(what(), " is on rank ", sh.rank, " >= world size ", index.world_size));
      }
      const IndexFile* found = nullptr;
      if (sh.named_file()) {
        auto it = files.find(*sh.named_file());
        if (it != files.end()) found = it->second;
      } else if (sh.rank >= 0) {
        found = file_of_rank(sh.rank);
      }
      if (found == nullptr) {
        return BadKey(display_name, t.key,
                      absl::StrCat(what(), " names file ", Quote(ShardFileName(index, sh)),
                                   ", which is not in the file list"));
      }
      const IndexFile& f = *found;
      auto n = CheckedNumElements(sh.sizes);
      if (!n.ok()) return BadKey(display_name, t.key, absl::StrCat(what(), ": ", n.status().message()));
      if (*n > INT64_MAX / elem) return BadKey(display_name, t.key, absl::StrCat(what(), " is too large"));
      const int64_t want = *n * elem;
      if (sh.begin < 8 + f.header_bytes || sh.begin > sh.end || sh.end > f.bytes) {
        return BadKey(display_name, t.key,
                      absl::StrCat(what(), " byte_range [", sh.begin, ", ", sh.end, ") is out of range for file ",
                                   Quote(f.name), " (data in [", 8 + f.header_bytes, ", ", f.bytes, "))"));
      }
      if (sh.end - sh.begin != want) {
        return BadKey(display_name, t.key, absl::StrCat(what(), " byte_range holds ", sh.end - sh.begin, " bytes; sizes ",
                                                        ShapeToString(sh.sizes), " need ", want));
      }
      if (static_cast<int64_t>(sh.block_crcs.size()) != NumBlocks(want, index.block_bytes)) {
        return BadKey(display_name, t.key, absl::StrCat(what(), " has ", sh.block_crcs.size(), " checksums; its ", want,
                                                        " bytes need ", NumBlocks(want, index.block_bytes)));
      }
      if (sh.named_entry() && sh.named_entry()->empty()) {
        return BadKey(display_name, t.key, absl::StrCat(what(), " has an empty entry name"));
      }
      SL_RETURN_IF_ERROR(internal::ValidateShardNaming(t, k, f, display_name));
      if (want > 0) ranges.push_back({static_cast<size_t>(&f - index.files.data()), sh.begin, sh.end, &t.key, k});
    }
    if (t.sharded && !SurelyTiles(t, *total)) {
      ShardedTensorMetadata m = t.Metadata();
      s = m.Validate();
      if (!s.ok()) {
        return BadKey(display_name, t.key, absl::StrCat("the shards do not tile the tensor: ", s.message()));
      }
    }
  }
  // Files by name, then each file's ranges by begin: grouped by file in
  // linear time, and as a save lists a file's shards in byte order, a
  // group is sorted only when it is not already.
  std::vector<size_t> by_name(index.files.size());
  for (size_t i = 0; i < by_name.size(); ++i) by_name[i] = i;
  std::sort(by_name.begin(), by_name.end(),
            [&](size_t a, size_t b) { return index.files[a].name < index.files[b].name; });
  std::vector<size_t> group_begin(index.files.size() + 1, 0);  // by_name order
  {
    std::vector<size_t> position(index.files.size());  // of each file in by_name
    for (size_t i = 0; i < by_name.size(); ++i) position[by_name[i]] = i;
    for (const Range& r : ranges) ++group_begin[position[r.file] + 1];
    for (size_t i = 1; i < group_begin.size(); ++i) group_begin[i] += group_begin[i - 1];
    std::vector<size_t> fill(group_begin.begin(), group_begin.end() - 1);
    std::vector<Range> grouped(ranges.size());
    for (const Range& r : ranges) grouped[fill[position[r.file]]++] = r;
    ranges.swap(grouped);
  }
  for (size_t i = 0; i < by_name.size(); ++i) {
    const auto first = ranges.begin() + static_cast<ptrdiff_t>(group_begin[i]);
    const auto last = ranges.begin() + static_cast<ptrdiff_t>(group_begin[i + 1]);
    auto by_begin = [](const Range& a, const Range& b) { return a.begin < b.begin; };
    if (!std::is_sorted(first, last, by_begin)) std::sort(first, last, by_begin);
    for (auto it = first + (first == last ? 0 : 1); it < last; ++it) {
      const Range& a = *(it - 1);
      const Range& b = *it;
      if (a.end > b.begin) {
        return BadKey(display_name, *b.key,
                      absl::StrCat("shard ", b.shard, " bytes [", b.begin, ", ", b.end, ") overlap key ", Quote(*a.key),
                                   " shard ", a.shard, " bytes [", a.begin, ", ", a.end, ") in file ",
                                   Quote(index.files[a.file].name)));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace shardlight::sharded::checkpoint
