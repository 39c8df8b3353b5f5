// The dtype names a checkpoint writes, spelled as safetensors spells them
// ("F32", "BF16", "U16", "F8_E4M3", "C64", ...), so any safetensors reader
// opens a rank's file; four dtypes safetensors has no name for get ours
// ("F8_E4M3FNUZ", "F8_E5M2FNUZ", "C32", "C128"; FORMAT.md). The table is
// sharded/dtype_table.h.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_DTYPE_NAMES_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_DTYPE_NAMES_H_

#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace shardlight::sharded::checkpoint {

// std::nullopt for a name this reader does not know (or whose dtype this
// LibTorch lacks: UnknownDtypeMessage says so).
std::optional<c10::ScalarType> DtypeFromName(absl::string_view name);

// Why DtypeFromName refused `name`: "unknown dtype 'X'", or "dtype
// float8_e4m3fn needs LibTorch >= 2.1; this build is 1.13.1".
std::string UnknownDtypeMessage(absl::string_view name);

// "" for a dtype a checkpoint cannot hold (quantized, bits, ...).
std::string DtypeName(c10::ScalarType dtype);

// Bytes per element of a dtype DtypeName accepts.
inline int64_t DtypeBytes(c10::ScalarType dtype) { return static_cast<int64_t>(c10::elementSize(dtype)); }

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_DTYPE_NAMES_H_
