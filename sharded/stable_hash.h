// StableHash: the fingerprint ranks compare to confirm they are about to do
// the same thing (a layout, a destination, a state dict's structure). It must
// be the same in every process, build and platform, so it is FNV-1a over
// bytes, never std::hash.
#ifndef SHARDLIGHT_SHARDED_STABLE_HASH_H_
#define SHARDLIGHT_SHARDED_STABLE_HASH_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace shardlight::sharded {

inline constexpr uint64_t kStableHashSeed = 0xcbf29ce484222325ULL;

// FNV-1a (64-bit) of `text`, continuing from `h` so that several parts can be
// hashed in turn; each part ends with a separator byte, so ("ab", "c") and
// ("a", "bc") differ.
uint64_t StableHash(absl::string_view text, uint64_t h = kStableHashSeed);

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_STABLE_HASH_H_
