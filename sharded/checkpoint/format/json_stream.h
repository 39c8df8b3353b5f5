// JSON from outside the process (a checkpoint index, a safetensors header)
// read by a strict pull parser whose cost is bounded by the text's size and
// whose memory holds no document: a decoder walks the text member by member
// and keeps only what it decodes. Compared with a plain nlohmann DOM (which
// costs up to ~85 bytes of memory per input byte, keeps the last of two
// equal keys and skips a UTF-8 byte-order mark) this reader:
//   - refuses a byte-order mark, nesting deeper than `max_depth` (skipped
//     values included), a key seen twice in one kept object, and any kept
//     array longer than `max_array_length`;
//   - validates every string as strict UTF-8 (RFC 3629) and the whole text
//     as JSON (RFC 8259), also inside skipped values;
//   - allocates nothing per token: keys and strings are views into the text
//     (or into the reader, when they hold escapes).
// "Kept" is the decoder's word for a value it stores: a kept object checks
// its keys for duplicates, a kept array counts its elements (CountElement);
// a value skipped unkept is only checked for syntax and nesting.
// Errors are InvalidArgument naming `display_name`; a syntax error carries the
// line, column and byte offset, with raw bytes escaped (the text may be
// invalid UTF-8). A parser of a plain byte buffer: fuzz targets reach it
// through DecodeIndex and ParseSafetensorsHeader.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_JSON_STREAM_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_JSON_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"

namespace shardlight::sharded::checkpoint {

struct JsonLimits {
  // The root is depth 1; deeper nesting is refused.
  int max_depth = 8;
  // Longest kept array (counted by CountElement).
  size_t max_array_length = 64;
  // Whether member `key` of a kept object that Skip walks is kept too (and
  // so checked as kept); null: no member of such an object is kept.
  bool (*keep_nested)(absl::string_view key) = nullptr;
};

class JsonReader {
 public:
  enum class Type : uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };
  struct Number {
    enum Kind : uint8_t { kInt, kUint, kFloat } kind = kInt;
    int64_t i = 0;   // kInt: a negative integer
    uint64_t u = 0;  // kUint: a non-negative integer
  };

  // `text` must outlive the reader. A byte-order mark fails at once.
  JsonReader(absl::string_view text, const JsonLimits& limits, std::string display_name);
  JsonReader(const JsonReader&) = delete;
  JsonReader& operator=(const JsonReader&) = delete;

  bool ok() const { return status_.ok(); }
  // The first error (syntax, limits, or one set by Fail).
  const absl::Status& status() const { return status_; }

  // The type of the next value, not consumed. False on an error.
  bool Peek(Type* type);
  // Consume the next value, which must be of that type; false on an error
  // (a value of another type is a syntax error: Peek first).
  bool BeginObject(bool kept);
  // The next member's key (the reader then stands before its value, which
  // the caller must consume); false after the closing brace or on an error.
  // The view lives as long as the object.
  bool NextKey(absl::string_view* key);
  bool BeginArray(bool kept);
  // Whether another element follows (the caller must consume it); false
  // after the closing bracket or on an error.
  bool NextElement();
  // Counts one element of the innermost array, which must be kept: fails
  // past max_array_length.
  bool CountElement();
  // The view lives until the next ReadString or NextKey.
  bool ReadString(absl::string_view* out);
  bool ReadNumber(Number* out);
  bool ReadBool(bool* out);
  bool ReadNull();
  // Consumes any value: `kept` checks it as a kept value (see above).
  bool Skip(bool kept);
  // After the root value: only whitespace may follow.
  bool End();

  // Makes `what` the reader's error (if it has none) and returns false.
  bool Fail(absl::string_view what);

  // A decoder's fast path for a value it expects in one exact spelling
  // (what its own writer emits): the text from the next value on (empty on
  // an error). When the decoder recognises a whole value at its start --
  // checked at least as strictly as this reader would check it, and nothing
  // this reader would refuse or read differently -- Consume(n) moves past
  // its n bytes, as reading the value would; otherwise the decoder reads the
  // value as usual.
  absl::string_view Rest();
  void Consume(size_t n) { p_ += n; }

 private:
  struct Frame {
    bool array = false;
    bool kept = false;
    bool first = true;
    size_t count = 0;
    absl::string_view key;  // the member being read (objects)
    std::vector<absl::string_view> keys;
    absl::flat_hash_set<absl::string_view> many_keys;
  };

  void SkipSpace();
  // A syntax error at `at`, quoting the token that starts at `token_begin`.
  bool SyntaxError(const char* at, absl::string_view what, const char* token_begin);
  // The syntax error for whatever stands at the current position.
  bool Unexpected(const char* context);
  bool Open(bool array, bool kept);
  bool AddKey(Frame& f, absl::string_view key);
  // At an opening quote: the decoded string; `escaped` (optional) says
  // whether it is in scratch_ rather than in the text.
  bool LexString(absl::string_view* out, bool* escaped);
  bool LexLiteral(absl::string_view word);
  // "the top level", or the quoted path of the container at depth `n`
  // ("/tensors/[]/shards/[]": "/<key>" per member, "/[]" per element).
  std::string PathText(size_t n) const;

  const char* begin_;
  const char* p_;
  const char* end_;
  JsonLimits limits_;
  std::string display_name_;
  absl::Status status_;
  std::vector<Frame> frames_;
  size_t depth_ = 0;
  std::string scratch_;
  std::deque<std::string> escaped_keys_;  // keys that held escapes
};

// Appends `text` as a JSON string literal (quotes, escapes as nlohmann's
// dump writes them): the writers' side of what this reader reads.
void AppendJsonString(std::string* out, absl::string_view text);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_JSON_STREAM_H_
