// Test support: seeded random sharding layouts and reference tensors.
//
// RandomLayout draws a layout the way users hit the edge cases: dims 1-4,
// uneven chunks, empty shards, several shards per rank, chunk or enumerable
// (a random grid). Every rank that draws with the same seed gets the same
// layout. ReferenceTensor gives a tensor whose every element is distinct (up
// to the dtype's range), so a misplaced element is always caught.
#ifndef SHARDLIGHT_SHARDED_TEST_LAYOUTS_H_
#define SHARDLIGHT_SHARDED_TEST_LAYOUTS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "sharded/sharded_tensor.h"
#include "sharded/sharding_spec.h"

namespace shardlight::sharded::testing {

struct Layout {
  std::vector<int64_t> sizes;
  c10::ScalarType dtype;
  ShardingSpec spec;
  std::string description;
};

// A random layout for `world_size` ranks.
Layout RandomLayout(std::mt19937_64& rng, int world_size);

// A random spec for a tensor of `sizes` (chunk or grid), described in `description`.
ShardingSpec RandomSpecFor(std::mt19937_64& rng, const std::vector<int64_t>& sizes, int world_size,
                           std::string* description);

// The global tensor the tests shard: element i holds a value derived from i.
at::Tensor ReferenceTensor(const std::vector<int64_t>& sizes, c10::ScalarType dtype);

// This rank's shards of `reference` under `metadata`, as independent copies.
std::vector<Shard> LocalShardsOf(const at::Tensor& reference, const ShardedTensorMetadata& metadata, int rank);

}  // namespace shardlight::sharded::testing

#endif  // SHARDLIGHT_SHARDED_TEST_LAYOUTS_H_
