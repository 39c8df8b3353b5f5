// Typed, non-throwing access to fields of parsed JSON (index and headers):
// a missing field or a wrong type is an InvalidArgument naming the field, so
// a hand-edited or hostile file yields an error instead of an exception.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_JSON_FIELDS_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_JSON_FIELDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace shardlight::sharded::checkpoint {

// `parent[name]` when parent is an object holding it, else nullptr.
const nlohmann::json* Field(const nlohmann::json& parent, const char* name);

// A JSON integer in [min, max]; `what` names it in the error.
absl::StatusOr<int64_t> AsInt64(const nlohmann::json* value, const std::string& what, int64_t min = 0,
                                int64_t max = INT64_MAX);
absl::StatusOr<std::string> AsString(const nlohmann::json* value, const std::string& what);
// An array of integers in [min, max], at most `max_length` of them.
absl::StatusOr<std::vector<int64_t>> AsInt64Array(const nlohmann::json* value, const std::string& what,
                                                  size_t max_length, int64_t min = 0, int64_t max = INT64_MAX);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_JSON_FIELDS_H_
