// JSON from outside the process (a checkpoint index, a safetensors header)
// parsed at a cost bounded by its size. A plain nlohmann DOM costs up to ~85
// bytes of memory per input byte (N MiB of '[' is N Mi nested arrays), keeps
// the last of two equal keys and skips a UTF-8 byte-order mark; this parser
// instead:
//   - refuses a byte-order mark, nesting deeper than `max_depth`, a key seen
//     twice in one object, and any kept array longer than `max_array_length`;
//   - keeps only the members the spec asks for (others are skipped unread);
//   - hands each complete "record" (an object at a path the spec names, such
//     as one shard of the index) to a callback and then drops it, so memory
//     holds one record at a time plus what the callback builds.
// Errors are InvalidArgument naming `display_name`; a syntax error carries the
// line, column and byte position, with raw bytes escaped (the text may be
// invalid UTF-8). A parser of a plain byte buffer: fuzz targets call it.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_JSON_STREAM_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_JSON_STREAM_H_

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace shardlight::sharded::checkpoint {

struct JsonStreamSpec {
  // The root is depth 1; deeper nesting is refused.
  int max_depth = 8;
  // Longest array kept in memory (records' parents are not kept).
  size_t max_array_length = 64;
  // Whether member `key` of the kept object at `path` is kept. Paths are
  // "" for the root, then "/<key>" per object member and "/[]" per array
  // element: "/tensors/[]/shards/[]". A member not kept is parsed and dropped.
  std::function<bool(const std::string& path, const std::string& key)> keep_member;
  // Whether a complete object at `path` (`depth` from the root) is a record.
  std::function<bool(const std::string& path, int depth)> is_record;
  // Receives each record (`key` is its member name, empty in an array); an
  // error stops the parse and is returned as is.
  std::function<absl::Status(const std::string& path, const std::string& key, nlohmann::json&& record)> on_record;
};

// The document without its records and without the members not kept.
absl::StatusOr<nlohmann::json> ParseJsonStream(std::string_view text, const JsonStreamSpec& spec,
                                               const std::string& display_name);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_JSON_STREAM_H_
