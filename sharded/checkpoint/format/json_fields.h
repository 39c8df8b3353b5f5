// Typed reads of the members a decoder keeps (index and headers), from a
// JsonReader positioned before the member's value: a value of the wrong type
// or out of range is consumed (checked as a kept value) and becomes an
// InvalidArgument naming the field, so a hand-edited or hostile file yields
// an error instead of an exception. The field is named `what` + `field`
// ("shard 3" + " offsets"), a text built only on error. A failure of the
// reader itself (syntax, limits) is returned too but stays in
// reader.status(), which decoders report first.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_JSON_FIELDS_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_JSON_FIELDS_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include "sharded/box.h"
#include <vector>

#include "absl/status/status.h"
#include "sharded/checkpoint/format/json_stream.h"

namespace shardlight::sharded::checkpoint {

using ::shardlight::sharded::Dims;

// "<what><field> is missing".
absl::Status MissingField(absl::string_view what, absl::string_view field);

// A JSON integer in [min, max].
absl::Status ReadInt64(JsonReader& reader, absl::string_view what, absl::string_view field, int64_t min, int64_t max,
                       int64_t* out);
absl::Status ReadString(JsonReader& reader, absl::string_view what, absl::string_view field, std::string* out);
// An array of integers in [min, max], at most `max_length` of them.
absl::Status ReadInt64Array(JsonReader& reader, absl::string_view what, absl::string_view field, size_t max_length,
                            int64_t min, int64_t max, std::vector<int64_t>* out);
absl::Status ReadInt64Array(JsonReader& reader, absl::string_view what, absl::string_view field, size_t max_length,
                            int64_t min, int64_t max, Dims* out);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_JSON_FIELDS_H_
