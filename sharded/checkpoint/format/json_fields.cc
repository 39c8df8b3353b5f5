#include "sharded/checkpoint/format/json_fields.h"
#include "sharded/status_macros.h"

#include "absl/strings/str_cat.h"

namespace shardlight::sharded::checkpoint {

const nlohmann::json* Field(const nlohmann::json& parent, const char* name) {
  if (!parent.is_object()) return nullptr;
  auto it = parent.find(name);
  return it == parent.end() ? nullptr : &*it;
}

absl::StatusOr<int64_t> AsInt64(const nlohmann::json* value, const std::string& what, int64_t min, int64_t max) {
  if (value == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, " is missing"));
  int64_t v;
  if (value->is_number_unsigned()) {
    const uint64_t u = value->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) {
      return absl::InvalidArgumentError(absl::StrCat(what, " = ", u, " is out of range"));
    }
    v = static_cast<int64_t>(u);
  } else if (value->is_number_integer()) {
    v = value->get<int64_t>();
  } else {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not an integer"));
  }
  if (v < min || v > max) {
    return absl::InvalidArgumentError(absl::StrCat(what, " = ", v, " is outside [", min, ", ", max, "]"));
  }
  return v;
}

absl::StatusOr<std::string> AsString(const nlohmann::json* value, const std::string& what) {
  if (value == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, " is missing"));
  if (!value->is_string()) return absl::InvalidArgumentError(absl::StrCat(what, " is not a string"));
  return value->get<std::string>();
}

absl::StatusOr<std::vector<int64_t>> AsInt64Array(const nlohmann::json* value, const std::string& what,
                                                  size_t max_length, int64_t min, int64_t max) {
  if (value == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, " is missing"));
  if (!value->is_array()) return absl::InvalidArgumentError(absl::StrCat(what, " is not an array"));
  if (value->size() > max_length) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has ", value->size(), " elements; at most ", max_length));
  }
  std::vector<int64_t> out;
  out.reserve(value->size());
  for (size_t i = 0; i < value->size(); ++i) {
    SL_ASSIGN_OR_RETURN(auto v, AsInt64(&(*value)[i], absl::StrCat(what, "[", i, "]"), min, max));
    out.push_back(v);
  }
  return out;
}

}  // namespace shardlight::sharded::checkpoint
