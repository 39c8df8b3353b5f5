// Which state-dict keys and data-file names a checkpoint accepts.
//
// Keys are stored inside files, never used as paths, yet a key such as
// "../x" or "a/b" is refused at save and at load: tools that derive paths
// from keys (consolidation into per-key files, other readers) must never be
// steered outside the checkpoint directory. File names in an index must be
// plain names in the checkpoint directory itself. Keys must be valid UTF-8:
// they are stored in JSON, which holds nothing else.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_NAMES_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_NAMES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace shardlight::sharded::checkpoint {

// InvalidArgument quoting the key when it is empty, longer than 1024 bytes,
// not valid UTF-8 (see IsValidUtf8), or holds '/', '\', "..", or a control
// character.
absl::Status ValidateKey(absl::string_view key);

// Strict UTF-8 (RFC 3629): no overlong forms, no surrogates (U+D800..DFFF),
// nothing above U+10FFFF, no truncated sequence. When `bad_offset` is given
// and the text is invalid, it receives the offset of the first bad sequence.
bool IsValidUtf8(absl::string_view text, size_t* bad_offset = nullptr);

// InvalidArgument quoting the name unless it is 1-255 characters of
// [A-Za-z0-9._-] not starting with '.' (so never "." or "..", never hidden).
absl::Status ValidateFileName(absl::string_view name);

// A name quoted for messages: printable ASCII kept, the rest \xNN, at most
// 200 characters.
std::string Quote(absl::string_view text);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_NAMES_H_
