// Counter-based random values keyed by (seed, global element index).
//
// A shard's values depend only on the seed and each element's position in the
// global tensor, never on the rank, the world size or the spec: the same seed
// gives a bit-identical global tensor on 1 rank or 64.
#ifndef SHARDLIGHT_SHARDED_GLOBAL_RANDOM_H_
#define SHARDLIGHT_SHARDED_GLOBAL_RANDOM_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace shardlight::sharded {

enum class RandomKind { kUniform, kNormal };  // U[0, 1) and N(0, 1)

// Fills `out` (which holds the box at `offsets` of a tensor of
// `global_sizes`; float32/float64/bfloat16) with values for its elements.
void FillGlobalRandom(at::Tensor& out, absl::Span<const int64_t> offsets,
                      absl::Span<const int64_t> global_sizes, uint64_t seed, RandomKind kind);

// The value for one global linear index, as FillGlobalRandom computes it.
double GlobalRandomValue(uint64_t seed, uint64_t index, RandomKind kind);

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_GLOBAL_RANDOM_H_
