// The dtype names a checkpoint writes, spelled as safetensors spells them
// ("F32", "BF16", "BOOL", ...), so any safetensors reader opens a rank's file.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_DTYPE_NAMES_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_DTYPE_NAMES_H_

#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace shardlight::sharded::checkpoint {

// std::nullopt for a name this reader does not know.
std::optional<c10::ScalarType> DtypeFromName(absl::string_view name);

// "" for a dtype a checkpoint cannot hold (complex, quantized, ...).
std::string DtypeName(c10::ScalarType dtype);

// Bytes per element of a dtype DtypeName accepts.
inline int64_t DtypeBytes(c10::ScalarType dtype) { return static_cast<int64_t>(c10::elementSize(dtype)); }

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_DTYPE_NAMES_H_
