#include "sharded/stable_hash.h"

namespace shardlight::sharded {

uint64_t StableHash(absl::string_view text, uint64_t h) {
  constexpr uint64_t kPrime = 0x100000001b3ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= kPrime;
  }
  h ^= 0xff;  // the part separator
  h *= kPrime;
  return h;
}

}  // namespace shardlight::sharded
