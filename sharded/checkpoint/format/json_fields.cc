#include "sharded/checkpoint/format/json_fields.h"

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {
namespace {

using Type = JsonReader::Type;

// `index` < 0: not an array element.
absl::Status Invalid(absl::string_view what, absl::string_view field, int64_t index, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, field, index < 0 ? "" : absl::StrCat("[", index, "]"), problem));
}

// The next value as an integer in [min, max]; `index` (an array element's,
// or -1) is part of its name.
absl::Status ReadInt(JsonReader& reader, absl::string_view what, absl::string_view field, int64_t index,
                     int64_t min, int64_t max, int64_t* out) {
  Type type;
  if (!reader.Peek(&type)) return reader.status();
  if (type != Type::kNumber) {
    if (!reader.Skip(/*kept=*/true)) return reader.status();
    return Invalid(what, field, index, " is not an integer");
  }
  JsonReader::Number n;
  if (!reader.ReadNumber(&n)) return reader.status();
  int64_t v;
  if (n.kind == JsonReader::Number::kUint) {
    if (n.u > static_cast<uint64_t>(INT64_MAX)) return Invalid(what, field, index, absl::StrCat(" = ", n.u, " is out of range"));
    v = static_cast<int64_t>(n.u);
  } else if (n.kind == JsonReader::Number::kInt) {
    v = n.i;
  } else {
    return Invalid(what, field, index, " is not an integer");
  }
  if (v < min || v > max) {
    return Invalid(what, field, index, absl::StrCat(" = ", v, " is outside [", min, ", ", max, "]"));
  }
  *out = v;
  return absl::OkStatus();
}

}  // namespace

absl::Status MissingField(absl::string_view what, absl::string_view field) {
  return Invalid(what, field, -1, " is missing");
}

absl::Status ReadInt64(JsonReader& reader, absl::string_view what, absl::string_view field, int64_t min, int64_t max,
                       int64_t* out) {
  return ReadInt(reader, what, field, -1, min, max, out);
}

absl::Status ReadString(JsonReader& reader, absl::string_view what, absl::string_view field, std::string* out) {
  Type type;
  if (!reader.Peek(&type)) return reader.status();
  if (type != Type::kString) {
    if (!reader.Skip(/*kept=*/true)) return reader.status();
    return Invalid(what, field, -1, " is not a string");
  }
  absl::string_view s;
  if (!reader.ReadString(&s)) return reader.status();
  out->assign(s.data(), s.size());
  return absl::OkStatus();
}

namespace {

template <typename Ints>
absl::Status ReadInts(JsonReader& reader, absl::string_view what, absl::string_view field, size_t max_length,
                      int64_t min, int64_t max, Ints* out) {
  Type type;
  if (!reader.Peek(&type)) return reader.status();
  if (type != Type::kArray) {
    if (!reader.Skip(/*kept=*/true)) return reader.status();
    return Invalid(what, field, -1, " is not an array");
  }
  // Gathered inline and handed over in one allocation of the exact size: a
  // push_back per element would allocate twice for a two-element array.
  absl::InlinedVector<int64_t, 8> values;
  absl::Status first;  // the first bad element; the array is read to its end
  size_t n = 0;
  if (!reader.BeginArray(/*kept=*/true)) return reader.status();
  while (reader.NextElement()) {
    if (!reader.CountElement()) return reader.status();
    int64_t v = 0;
    absl::Status s = first.ok() && n < max_length
                         ? ReadInt(reader, what, field, static_cast<int64_t>(n), min, max, &v)
                         : (reader.Skip(/*kept=*/true) ? absl::OkStatus() : reader.status());
    SL_RETURN_IF_ERROR(reader.status());
    if (!s.ok() && first.ok()) first = s;
    if (s.ok() && n < max_length) values.push_back(v);
    ++n;
  }
  SL_RETURN_IF_ERROR(reader.status());
  out->assign(values.begin(), values.end());
  if (n > max_length) {
    return Invalid(what, field, -1, absl::StrCat(" has ", n, " elements; at most ", max_length));
  }
  return first;
}

}  // namespace

absl::Status ReadInt64Array(JsonReader& reader, absl::string_view what, absl::string_view field, size_t max_length,
                            int64_t min, int64_t max, std::vector<int64_t>* out) {
  return ReadInts(reader, what, field, max_length, min, max, out);
}

absl::Status ReadInt64Array(JsonReader& reader, absl::string_view what, absl::string_view field, size_t max_length,
                            int64_t min, int64_t max, Dims* out) {
  return ReadInts(reader, what, field, max_length, min, max, out);
}

}  // namespace shardlight::sharded::checkpoint
