// DecodeIndex: index.json to a CheckpointIndex through JsonReader, one file,
// tensor or shard at a time straight into the index's structs (no DOM), so a
// hostile index costs memory in proportion to what it describes, not to its
// text. The trailing index_crc32c member (FORMAT.md) is checked when present.
#include <array>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <type_traits>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/numbers.h"
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

absl::Status Bad(const std::string& index_name, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("checkpoint index ", Quote(index_name), ": ", what));
}

absl::Status BadKey(const std::string& index_name, const std::string& key, const std::string& what) {
  return Bad(index_name, absl::StrCat("key ", Quote(key), ": ", what));
}

using Type = JsonReader::Type;

// The first error of N fields, in the order a record checks them (not the
// order its text holds them); a field never seen is missing.
template <size_t N>
struct FieldChecks {
  void Set(size_t field, absl::Status s) {
    seen[field] = true;
    status[field] = std::move(s);
  }
  absl::Status First(absl::string_view what, const std::array<absl::string_view, N>& names) const {
    for (size_t i = 0; i < N; ++i) {
      if (!seen[i]) return MissingField(what, names[i]);
      if (!status[i].ok()) return status[i];
    }
    return absl::OkStatus();
  }
  std::array<absl::Status, N> status;
  std::array<bool, N> seen{};
};

// One element of "files"; the reader stands before its '{'.
absl::StatusOr<IndexFile> DecodeFile(JsonReader& r, size_t i) {
  const std::string what = absl::StrCat("files[", i, "]");
  IndexFile file;
  FieldChecks<4> checks;
  int64_t rank = 0;
  if (!r.BeginObject(/*kept=*/true)) return r.status();
  absl::string_view key;
  while (r.NextKey(&key)) {
    if (key == "name") {
      checks.Set(0, ReadString(r, what, " name", &file.name));
    } else if (key == "rank") {
      checks.Set(1, ReadInt64(r, what, " rank", 0, kMaxWorldSize, &rank));
    } else if (key == "bytes") {
      checks.Set(2, ReadInt64(r, what, " bytes", 0, INT64_MAX, &file.bytes));
    } else if (key == "header_bytes") {
      checks.Set(3, ReadInt64(r, what, " header_bytes", 0, INT64_MAX, &file.header_bytes));
    } else if (!r.Skip(/*kept=*/false)) {
      break;
    }
  }
  SL_RETURN_IF_ERROR(r.status());
  SL_RETURN_IF_ERROR(checks.First(what, {{" name", " rank", " bytes", " header_bytes"}}));
  file.rank = static_cast<int>(rank);
  return file;
}

// One shard of a tensor (`n` shards before it); the reader stands before
// its '{'. A decoding error is returned as the record's error; the reader's
// own failure stays in the reader.
// `range` is scratch space, reused from shard to shard.
absl::Status DecodeShard(JsonReader& r, size_t n, IndexShard* s, std::vector<int64_t>& range) {
  const std::string what = absl::StrCat("shard ", n);
  FieldChecks<7> checks;
  range.clear();
  std::string crcs, file, entry;
  int64_t rank = 0;
  if (!r.BeginObject(/*kept=*/true)) return r.status();
  absl::string_view key;
  while (r.NextKey(&key)) {
    if (key == "offsets") {
      checks.Set(0, ReadInt64Array(r, what, " offsets", kMaxDims, 0, INT64_MAX, &s->offsets));
    } else if (key == "sizes") {
      checks.Set(1, ReadInt64Array(r, what, " sizes", kMaxDims, 0, INT64_MAX, &s->sizes));
    } else if (key == "rank") {
      checks.Set(2, ReadInt64(r, what, " rank", 0, kMaxWorldSize, &rank));
    } else if (key == "file") {
      checks.Set(3, ReadString(r, what, " file", &file));
    } else if (key == "entry") {
      checks.Set(4, ReadString(r, what, " entry", &entry));
    } else if (key == "byte_range") {
      absl::Status st = ReadInt64Array(r, what, " byte_range", 2, 0, INT64_MAX, &range);
      if (st.ok() && range.size() != 2) st = absl::InvalidArgumentError(what + " byte_range is not [begin, end]");
      checks.Set(5, std::move(st));
    } else if (key == "crc32c") {
      absl::Status st = ReadString(r, what, " crc32c", &crcs);
      if (st.ok() && !DecodeCrcHex(crcs, &s->block_crcs)) {
        st = absl::InvalidArgumentError(what + " crc32c is not a string of 8-digit lowercase hex checksums");
      }
      checks.Set(6, std::move(st));
    } else if (!r.Skip(/*kept=*/false)) {
      break;
    }
  }
  SL_RETURN_IF_ERROR(r.status());
  SL_RETURN_IF_ERROR(
      checks.First(what, {{" offsets", " sizes", " rank", " file", " entry", " byte_range", " crc32c"}}));
  s->rank = static_cast<int>(rank);
  s->begin = range[0];
  s->end = range[1];
  s->set_named_file(std::move(file));  // (both present: checked above)
  s->set_named_entry(std::move(entry));
  return absl::OkStatus();
}

// Space DecodeTensor reuses from tensor to tensor.
struct DecodeScratch {
  std::vector<int64_t> range;      // a shard's byte_range
  std::vector<IndexShard> shards;  // a tensor's, moved out in one allocation of the exact size
  // Names shards once the generation is known (in the writer's spelling,
  // before the first tensor); until then, and for shards the reader's path
  // decodes before their key, the names are kept as spelled and `pending`
  // says that DecodeIndex names them once all is read.
  std::optional<ShardNamer> namer;
  bool pending = false;
};

// Unsets the names of `t`'s shards that are the ones this format derives.
void ForgetDerivedNames(const ShardNamer& namer, IndexTensor& t) {
  for (size_t k = 0; k < t.shards.size(); ++k) {
    IndexShard& s = t.shards[k];
    if (s.named_file() && namer.IsRankFile(*s.named_file(), s.rank)) s.set_named_file(std::nullopt);
    if (s.named_entry() && IsDerivedEntryName(*s.named_entry(), t.key, t.sharded, k)) s.set_named_entry(std::nullopt);
  }
}

// Moves the shards gathered in `scratch` into `tensor`: one allocation of the
// exact size.
void TakeShards(DecodeScratch& scratch, IndexTensor* tensor) {
  tensor->shards.clear();
  tensor->shards.reserve(scratch.shards.size());
  std::move(scratch.shards.begin(), scratch.shards.end(), std::back_inserter(tensor->shards));
  scratch.shards.clear();
}

// Reads a tensor or a shard spelled exactly as SerializeIndex writes it,
// without the reader's general machinery: fixed member order, punctuation
// and whitespace, integers of at most 18 digits without a leading zero,
// strings of printable ASCII without escapes, a dtype this build knows. What
// it accepts it decodes exactly as DecodeTensor / DecodeShard would (every
// such text is valid JSON, free of duplicate keys and of anything they
// refuse); on anything else it gives up and the reader's path reads the
// value, reporting what is wrong with it.
class CanonicalText {
 public:
  explicit CanonicalText(absl::string_view text) : begin_(text.data()), p_(begin_), end_(begin_ + text.size()) {}

  // The tensor's bytes of the text when the whole tensor record (its shards
  // included) is canonical and decodes into `t`; else 0 (`t` then holds
  // garbage). Its shards pass through `scratch`.
  size_t Tensor(IndexTensor* t, DecodeScratch& scratch) {
    absl::string_view key, dtype;
    if (!Literal("{\"key\": ") || !String(&key)) return 0;
    if (Literal(", \"kind\": \"sharded\", \"dtype\": ")) {
      t->sharded = true;
    } else if (Literal(", \"kind\": \"dense\", \"dtype\": ")) {
      t->sharded = false;
    } else {
      return 0;
    }
    if (!String(&dtype)) return 0;
    const std::optional<c10::ScalarType> known = DtypeFromName(dtype);
    if (!known || !Literal(", \"shape\": ") || !IntArray(&t->shape) || !Literal(", \"shards\": [")) return 0;
    t->dtype = *known;
    t->key.assign(key.data(), key.size());
    scratch.shards.clear();
    if (!Literal("]}")) {
      do {
        const bool separated = scratch.shards.empty() ? Literal("\n   ") : Literal(",\n   ");
        IndexShard* s = &scratch.shards.emplace_back();
        const size_t k = scratch.shards.size() - 1;
        ShardNamer* namer = scratch.namer ? &*scratch.namer : nullptr;
        Derived derived;
        absl::string_view file, entry;
        if (!separated || !Shard(s, &file, &entry, namer != nullptr ? &derived : nullptr, namer, t, k)) {
          scratch.shards.clear();
          return 0;
        }
        // (A new shard's names are unset: set here only when not derived.)
        if (namer == nullptr) {
          s->set_named_file(std::string(file));
          s->set_named_entry(std::string(entry));
          scratch.pending = true;
        } else {
          if (!derived.file && !namer->IsRankFile(file, s->rank)) s->set_named_file(std::string(file));
          if (!derived.entry && !IsDerivedEntryName(entry, t->key, t->sharded, k)) s->set_named_entry(std::string(entry));
        }
      } while (!Literal("]}"));
    }
    TakeShards(scratch, t);
    return Consumed();
  }

  // Which of a shard's names its text spells as this format derives them.
  struct Derived {
    bool file = false;
    bool entry = false;
  };

  // The shard's bytes of the text when it is canonical and decodes into
  // `s`, its names left to the caller in `file` and `entry` (views of the
  // text); else 0 (`s` then holds garbage). With `derived` (and `namer`,
  // and `t` the shard's tensor, its key and kind read, `k` the shard's
  // number), a name spelled exactly as derived is matched in place and
  // flagged there instead (its view left empty).
  size_t Shard(IndexShard* s, absl::string_view* file, absl::string_view* entry, Derived* derived = nullptr,
               ShardNamer* namer = nullptr, const IndexTensor* t = nullptr, size_t k = 0) {
    int64_t rank = 0;
    absl::string_view crcs;
    if (!Literal("{\"offsets\":") || !IntArray(&s->offsets) || !Literal(",\"sizes\":") || !IntArray(&s->sizes) ||
        !Literal(",\"rank\":") || !Int(kMaxWorldSize, &rank) || !Literal(",\"file\":")) {
      return 0;
    }
    if (derived != nullptr && namer->plain()) {
      if (const std::string* kept = namer->KeptRankFile(static_cast<int>(rank)); kept != nullptr) {
        derived->file = Quoted({*kept});
      } else {
        char buffer[ShardNamer::kRankDigitsBuffer];
        derived->file = Quoted({"data-", namer->generation(), "-r",
                                ShardNamer::RankDigits(static_cast<int>(rank), buffer), ".safetensors"});
      }
    }
    if (!(derived != nullptr && derived->file) && !String(file)) return 0;
    if (!Literal(",\"entry\":")) return 0;
    if (derived != nullptr) {
      if (t->sharded) {
        char digits[absl::numbers_internal::kFastToBufferSize];
        const char* digits_end = absl::numbers_internal::FastIntToBuffer(static_cast<uint64_t>(k), digits);
        const absl::string_view number(digits, static_cast<size_t>(digits_end - digits));
        derived->entry = Quoted({t->key, "/shard-", number});
      } else {
        derived->entry = Quoted({t->key});
      }
    }
    if (!(derived != nullptr && derived->entry) && !String(entry)) return 0;
    if (!Literal(",\"byte_range\":[") || !Int(INT64_MAX, &s->begin) ||
        !Literal(",") || !Int(INT64_MAX, &s->end) || !Literal("],\"crc32c\":") || !String(&crcs) || !Literal("}") ||
        !DecodeCrcHex(crcs, &s->block_crcs)) {
      return 0;
    }
    s->rank = static_cast<int>(rank);
    return Consumed();
  }

 private:
  static bool IsDigit(char c) { return c >= '0' && c <= '9'; }
  size_t Consumed() const { return static_cast<size_t>(p_ - begin_); }

  // The size is a constant of each call, so the compiler compares in place
  // (a call to memcmp per literal showed in profiles of a load).
  template <size_t N>
  bool Literal(const char (&text)[N]) {
    constexpr size_t n = N - 1;  // without the terminating NUL
    if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, text, n) != 0) return false;
    p_ += n;
    return true;
  }
  // A non-negative integer up to `max`, which a number's next byte ends.
  bool Int(int64_t max, int64_t* out) {
    const char* q = p_;
    if (q == end_ || !IsDigit(*q)) return false;
    int64_t v = 0;
    if (*q == '0') {
      ++q;
    } else {
      while (q < end_ && IsDigit(*q) && q - p_ < 18) v = v * 10 + (*q++ - '0');
    }
    if (q < end_ && (IsDigit(*q) || *q == '.' || *q == 'e' || *q == 'E')) return false;
    if (v > max) return false;
    p_ = q;
    *out = v;
    return true;
  }
  // "[]" or "[i,j,...]" with at most kMaxDims integers (`out` garbage when
  // it fails). Read straight into a box's inline dims; a tensor's shape, a
  // fresh vector, is gathered first and allocated once.
  template <typename Ints>
  bool IntArray(Ints* out) {
    if constexpr (std::is_same_v<Ints, std::vector<int64_t>>) {
      absl::InlinedVector<int64_t, 8> values;
      if (!IntArrayInto(&values)) return false;
      out->assign(values.begin(), values.end());
      return true;
    } else {
      return IntArrayInto(out);
    }
  }
  template <typename Ints>
  bool IntArrayInto(Ints* out) {
    if (!Literal("[")) return false;
    out->clear();
    if (!Literal("]")) {
      do {
        int64_t v;
        if (out->size() == kMaxDims || !Int(INT64_MAX, &v)) return false;
        out->push_back(v);
      } while (Literal(","));
      if (!Literal("]")) return false;
    }
    return true;
  }
  // Whether the text continues with the JSON string of `pieces` joined
  // (each printable ASCII without a quote or backslash: no escape); if so,
  // consumes it.
  bool Quoted(std::initializer_list<absl::string_view> pieces) {
    size_t length = 2;
    for (absl::string_view piece : pieces) length += piece.size();
    if (static_cast<size_t>(end_ - p_) < length || p_[0] != '"' || p_[length - 1] != '"') return false;
    const char* q = p_ + 1;
    for (absl::string_view piece : pieces) {
      if (std::memcmp(q, piece.data(), piece.size()) != 0) return false;
      q += piece.size();
    }
    p_ += length;
    return true;
  }
  bool String(absl::string_view* out) {
    if (!Literal("\"")) return false;
    const char* q = p_;
    while (q < end_ && *q >= 0x20 && *q <= 0x7e && *q != '"' && *q != '\\') ++q;
    if (q == end_ || *q != '"') return false;
    *out = absl::string_view(p_, static_cast<size_t>(q - p_));
    p_ = q + 1;
    return true;
  }

  const char* begin_;
  const char* p_;
  const char* end_;
};

// One element of "tensors"; the reader stands before its '{'. Errors wait
// for the key, which may come after the shards.
absl::StatusOr<IndexTensor> DecodeTensor(JsonReader& r, size_t i, const std::string& index_name,
                                         DecodeScratch& scratch) {
  IndexTensor tensor;
  if (const size_t n = CanonicalText(r.Rest()).Tensor(&tensor, scratch); n > 0) {
    r.Consume(n);
    return tensor;
  }
  tensor = IndexTensor();
  FieldChecks<5> checks;  // key, kind, dtype, shape, shards
  std::string kind, dtype_name;
  std::string shard_error;  // the first bad shard
  bool shards_array = false, shard_not_object = false;
  if (!r.BeginObject(/*kept=*/true)) return r.status();
  absl::string_view key;
  Type type;
  while (r.NextKey(&key)) {
    if (key == "key") {
      checks.Set(0, ReadString(r, "", "key", &tensor.key));
    } else if (key == "kind") {
      checks.Set(1, ReadString(r, "", "kind", &kind));
    } else if (key == "dtype") {
      checks.Set(2, ReadString(r, "", "dtype", &dtype_name));
    } else if (key == "shape") {
      checks.Set(3, ReadInt64Array(r, "", "shape", kMaxDims, 0, INT64_MAX, &tensor.shape));
    } else if (key == "shards") {
      checks.Set(4, absl::OkStatus());
      if (!r.Peek(&type)) break;
      if (type != Type::kArray) {
        if (!r.Skip(/*kept=*/true)) break;
        continue;
      }
      shards_array = true;
      if (!r.BeginArray(/*kept=*/true)) break;
      std::vector<IndexShard>& shards = scratch.shards;
      shards.clear();
      while (r.NextElement()) {
        if (!r.Peek(&type)) break;
        if (type != Type::kObject) {
          // Not a shard: kept, and so counted, like any array element.
          if (!r.CountElement() || !r.Skip(/*kept=*/true)) break;
          shard_not_object = true;
          continue;
        }
        IndexShard& shard = shards.emplace_back();
        absl::string_view file, entry;
        if (const size_t n = CanonicalText(r.Rest()).Shard(&shard, &file, &entry); n > 0) {
          r.Consume(n);
          shard.set_named_file(std::string(file));  // named once the key is known
          shard.set_named_entry(std::string(entry));
          continue;
        }
        shard = IndexShard();
        absl::Status s = DecodeShard(r, shards.size() - 1, &shard, scratch.range);
        if (!r.ok()) break;
        if (!s.ok()) {
          shards.pop_back();
          if (shard_error.empty()) shard_error = std::string(s.message());
        }
      }
      if (!r.ok()) break;
      TakeShards(scratch, &tensor);  // (a repeated "shards" member fails in the reader)
    } else if (!r.Skip(/*kept=*/false)) {
      break;
    }
  }
  SL_RETURN_IF_ERROR(r.status());
  if (!checks.seen[0] || !checks.status[0].ok()) {
    const std::string problem = checks.seen[0] ? std::string(checks.status[0].message()) : "key is missing";
    return Bad(index_name, absl::StrCat("tensors[", i, "] ", problem));
  }
  if (!checks.seen[1] || !checks.status[1].ok() || (kind != "dense" && kind != "sharded")) {
    return BadKey(index_name, tensor.key, "kind is not \"dense\" or \"sharded\"");
  }
  tensor.sharded = kind == "sharded";
  if (!checks.seen[2]) return BadKey(index_name, tensor.key, "dtype is missing");
  if (!checks.status[2].ok()) return BadKey(index_name, tensor.key, std::string(checks.status[2].message()));
  const auto dtype = DtypeFromName(dtype_name);
  if (!dtype) return BadKey(index_name, tensor.key, UnknownDtypeMessage(dtype_name));
  tensor.dtype = *dtype;
  if (!checks.seen[3]) return BadKey(index_name, tensor.key, "shape is missing");
  if (!checks.status[3].ok()) return BadKey(index_name, tensor.key, std::string(checks.status[3].message()));
  if (!shards_array) return BadKey(index_name, tensor.key, "shards is not an array");
  if (shard_not_object) return BadKey(index_name, tensor.key, "a shard is not an object");
  if (!shard_error.empty()) return BadKey(index_name, tensor.key, shard_error);
  if (scratch.namer) {
    ForgetDerivedNames(*scratch.namer, tensor);
  } else {
    scratch.pending = true;
  }
  return tensor;
}

// The optional "run" member: an array of "name=value" strings (kept, so at
// most kMaxDims long).
absl::Status DecodeRun(JsonReader& r, RunRecord* record, bool* is_array) {
  Type type;
  if (!r.Peek(&type)) return r.status();
  if (type != Type::kArray) {
    *is_array = false;
    return r.Skip(/*kept=*/true) ? absl::OkStatus() : r.status();
  }
  *is_array = true;
  absl::Status first;
  if (!r.BeginArray(/*kept=*/true)) return r.status();
  std::string text;
  while (r.NextElement()) {
    if (!r.CountElement()) return r.status();
    absl::Status s = ReadString(r, "", "an element of run", &text);
    SL_RETURN_IF_ERROR(r.status());
    if (!first.ok()) continue;
    if (!s.ok()) {
      first = s;
      continue;
    }
    const size_t eq = text.find('=');
    if (eq == std::string::npos) {
      first = absl::InvalidArgumentError(absl::StrCat("run member ", Quote(text), " is not \"name=value\""));
    } else if (!record->emplace(text.substr(0, eq), text.substr(eq + 1)).second) {
      first = absl::InvalidArgumentError(absl::StrCat("run names ", Quote(text.substr(0, eq)), " twice"));
    }
  }
  SL_RETURN_IF_ERROR(r.status());
  SL_RETURN_IF_ERROR(first);
  return ValidateRunRecord(*record);
}

// The optional "values" member: an array of {"key": K, "value": REPR}
// objects (plain_value.h). Not kept (its elements are records); the text it
// may hold is bounded by kMaxValuesBytes.
absl::Status DecodeValues(JsonReader& r, std::vector<IndexValue>* values, bool* is_array) {
  Type type;
  if (!r.Peek(&type)) return r.status();
  if (type != Type::kArray) {
    *is_array = false;
    return r.Skip(/*kept=*/true) ? absl::OkStatus() : r.status();
  }
  *is_array = true;
  absl::Status first;
  int64_t text = 0;
  if (!r.BeginArray(/*kept=*/true)) return r.status();
  while (r.NextElement()) {
    const std::string what = absl::StrCat("values[", values->size(), "]");
    if (!r.Peek(&type)) return r.status();
    if (type != Type::kObject) {
      if (!r.CountElement() || !r.Skip(/*kept=*/true)) return r.status();
      if (first.ok()) first = absl::InvalidArgumentError(absl::StrCat(what, " is not an object"));
      continue;
    }
    IndexValue v;
    std::string repr;
    FieldChecks<2> checks;
    if (!r.BeginObject(/*kept=*/true)) return r.status();
    absl::string_view key;
    while (r.NextKey(&key)) {
      if (key == "key") {
        checks.Set(0, ReadString(r, what, " key", &v.key));
      } else if (key == "value") {
        checks.Set(1, ReadString(r, what, " value", &repr));
      } else if (!r.Skip(/*kept=*/false)) {
        break;
      }
    }
    SL_RETURN_IF_ERROR(r.status());
    text += static_cast<int64_t>(repr.size());
    if (text > kMaxValuesBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("the values' text holds more than ", kMaxValuesBytes, " bytes"));
    }
    if (!first.ok()) continue;
    absl::Status s = checks.First(what, {{" key", " value"}});
    if (s.ok()) {
      auto parsed = ParsePlainValue(repr);
      if (parsed.ok()) {
        v.value = *std::move(parsed);
      } else {
        s = absl::InvalidArgumentError(absl::StrCat("key ", Quote(v.key), ": value ", parsed.status().message()));
      }
    }
    if (s.ok()) {
      values->push_back(std::move(v));
    } else {
      first = s;
    }
  }
  SL_RETURN_IF_ERROR(r.status());
  return first;
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
  absl::StrAppend(&unsealed, " \"", kIndexChecksumField, "\": \"", crc, "\"\n}\n");  // in place: no copy of the text
  return unsealed;
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
  absl::Status first_error;  // of the records: reported after the version check
  auto note = [&](absl::Status s) {
    if (first_error.ok()) first_error = std::move(s);
  };
  JsonLimits limits;
  limits.max_depth = kMaxIndexDepth;
  limits.max_array_length = kMaxDims;
  JsonReader r(json, limits, absl::StrCat("checkpoint index ", Quote(display_name)));
  // The root's members, checked in a fixed order once the text is read.
  std::string format, generation, algorithm;
  absl::Status format_ok = absl::InvalidArgumentError("missing"), algorithm_ok = format_ok;
  absl::Status version_ok = MissingField("", "version"), world_ok = MissingField("", "world_size");
  absl::Status generation_ok = MissingField("", "generation");
  absl::Status block_ok = MissingField("", "checksum.block_bytes"), run_ok, values_ok;
  int64_t version = 0, world = 0;
  DecodeScratch scratch;
  bool root_object = false, files_array = false, tensors_array = false, run_array = true, values_array = true;
  bool file_not_object = false, tensor_not_object = false;
  Type type;
  if (r.Peek(&type) && type == Type::kObject) {
    root_object = true;
    r.BeginObject(/*kept=*/true);
    absl::string_view key;
    while (r.NextKey(&key)) {
      if (key == "format") {
        format_ok = ReadString(r, "", "format", &format);
      } else if (key == "version") {
        version_ok = ReadInt64(r, "", "version", 1, INT64_MAX, &version);
      } else if (key == "world_size") {
        world_ok = ReadInt64(r, "", "world_size", 1, kMaxWorldSize, &world);
      } else if (key == "generation") {
        generation_ok = ReadString(r, "", "generation", &generation);
      } else if (key == "run") {
        run_ok = DecodeRun(r, &index.run, &run_array);
      } else if (key == "values") {
        values_ok = DecodeValues(r, &index.values, &values_array);
      } else if (key == kIndexChecksumField) {
        index.sealed = true;
        r.Skip(/*kept=*/true);
      } else if (key == "checksum") {
        if (!r.Peek(&type)) break;
        if (type != Type::kObject) {
          r.Skip(/*kept=*/true);
          continue;
        }
        r.BeginObject(/*kept=*/true);
        while (r.NextKey(&key)) {
          if (key == "algorithm") {
            algorithm_ok = ReadString(r, "", "checksum.algorithm", &algorithm);
          } else if (key == "block_bytes") {
            block_ok = ReadInt64(r, "", "checksum.block_bytes", kMinBlockBytes, kMaxBlockBytes, &index.block_bytes);
          } else {
            r.Skip(/*kept=*/false);
          }
        }
      } else if (key == "files" || key == "tensors") {
        const bool files = key == "files";
        if (!r.Peek(&type)) break;
        if (type != Type::kArray) {
          r.Skip(/*kept=*/true);
          continue;
        }
        (files ? files_array : tensors_array) = true;
        r.BeginArray(/*kept=*/true);
        while (r.NextElement()) {
          if (!r.Peek(&type)) break;
          if (type != Type::kObject) {
            // Not a record: kept, and so counted.
            if (r.CountElement()) r.Skip(/*kept=*/true);
            (files ? file_not_object : tensor_not_object) = true;
          } else if (files) {
            auto file = DecodeFile(r, index.files.size());
            if (!r.ok()) break;
            if (file.ok()) {
              index.files.push_back(*std::move(file));
            } else {
              note(Bad(display_name, std::string(file.status().message())));
            }
          } else {
            if (!scratch.namer && generation_ok.ok()) scratch.namer.emplace(generation);
            auto tensor = DecodeTensor(r, index.tensors.size(), display_name, scratch);
            if (!r.ok()) break;
            if (tensor.ok()) {
              index.tensors.push_back(*std::move(tensor));
            } else {
              note(tensor.status());
            }
          }
        }
      } else {
        r.Skip(/*kept=*/false);
      }
    }
  } else if (r.ok()) {
    r.Skip(/*kept=*/true);
  }
  r.End();
  SL_RETURN_IF_ERROR(r.status());
  if (!root_object) return Bad(display_name, "not a JSON object (corrupt or truncated)");
  if (!format_ok.ok() || format != kFormatName) return Bad(display_name, "not a shardlight checkpoint index");
  if (!version_ok.ok()) return Bad(display_name, std::string(version_ok.message()));
  // The version is checked before anything else a newer writer may change.
  if (version > kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint index ", Quote(display_name), ": written in format version ", version,
        ", newer than the version ", kFormatVersion, " this reader understands; upgrade shardlight to load it"));
  }
  // Before the records' errors: a flipped character is reported as such.
  if (index.sealed && check_checksum) SL_RETURN_IF_ERROR(CheckIndexChecksum(json, display_name));
  SL_RETURN_IF_ERROR(first_error);
  index.version = version;
  if (!world_ok.ok()) return Bad(display_name, std::string(world_ok.message()));
  index.world_size = static_cast<int>(world);
  if (!generation_ok.ok()) return Bad(display_name, std::string(generation_ok.message()));
  index.generation = std::move(generation);
  if (!run_array) return Bad(display_name, "run is not an array of \"name=value\" strings");
  if (!run_ok.ok()) return Bad(display_name, std::string(run_ok.message()));
  if (!values_array) return Bad(display_name, "values is not an array of {\"key\", \"value\"} objects");
  if (!values_ok.ok()) return Bad(display_name, std::string(values_ok.message()));
  if (!algorithm_ok.ok() || algorithm != "crc32c") return Bad(display_name, "checksum.algorithm is not \"crc32c\"");
  if (!block_ok.ok()) return Bad(display_name, std::string(block_ok.message()));
  if (!files_array) return Bad(display_name, "files is not an array");
  if (file_not_object) return Bad(display_name, "an element of files is not an object");
  if (!tensors_array) return Bad(display_name, "tensors is not an array");
  if (tensor_not_object) return Bad(display_name, "an element of tensors is not an object");
  if (scratch.pending) {
    ShardNamer namer(index.generation);
    for (IndexTensor& t : index.tensors) ForgetDerivedNames(namer, t);
  }
  index.Reindex();
  return index;
}

}  // namespace shardlight::sharded::checkpoint
