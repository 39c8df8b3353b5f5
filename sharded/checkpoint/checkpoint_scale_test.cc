// Checkpoints with many tensors: the agreement is a constant number of
// collectives per save and per load whatever the tensor count, and 100,000
// small tensors (sharded with uneven and empty shards, and dense) save and
// load bit-exactly.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/rank_monitor.h"
#include "sharded/sharded_tensor.h"
#include "sharded/sharding_spec.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded::checkpoint {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;

// `n` tiny float tensors: even ones chunked on dim 0 over the ranks (sizes
// below the world size leave ranks with empty shards), odd ones dense.
// Element k of tensor t holds Value(t, k, salt); built without communication
// and cheaply (this is about the checkpoint's cost, not the helpers').
const std::vector<std::vector<int64_t>> kShapes = {{1}, {5}, {2, 3}, {7}, {4, 2}};

float Value(int t, int64_t k, int salt) { return static_cast<float>(((t * 16 + k) & 0xFFFFF) + salt * 0x100000); }

void Fill(const at::Tensor& x, int t, int64_t first, int salt) {
  float* p = x.data_ptr<float>();
  for (int64_t k = 0; k < x.numel(); ++k) p[k] = Value(t, first + k, salt);
}

absl::StatusOr<StateDict> MakeMany(int n, int salt, const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  StateDict state;
  for (int t = 0; t < n; ++t) {
    const std::vector<int64_t>& shape = kShapes[t % kShapes.size()];
    const std::string key = absl::StrCat("block", t / 10, ".p", t % 10);
    absl::Status s;
    if (t % 2 == 1) {
      at::Tensor dense = at::empty(shape, at::kFloat);
      Fill(dense, t, 0, salt);
      s = state.Insert(key, dense);
    } else {
      auto meta = BuildMetadata(ChunkShardingSpec::OnRanks(0, pg->getSize()), shape, {c10::ScalarType::Float, false},
                                pg->getSize());
      if (!meta.ok()) return meta.status();
      std::vector<Shard> shards = AllocateLocalShards(*meta, pg->getRank());
      const int64_t row = shape.size() > 1 ? shape[1] : 1;
      for (Shard& shard : shards) Fill(shard.tensor, t, shard.metadata.offsets[0] * row, salt);
      auto st = ShardedTensor::InitFromLocalShardsAndGlobalMetadata(std::move(shards), *std::move(meta), pg);
      if (!st.ok()) return st.status();
      s = state.Insert(key, *std::move(st));
    }
    if (!s.ok()) return s;
  }
  return state;
}

absl::Status CheckMany(const StateDict& state, int salt) {
  int t = 0;
  for (const auto& [key, value] : state.entries()) {
    std::vector<std::pair<at::Tensor, int64_t>> parts;  // (tensor, linear index of its first element)
    if (const at::Tensor* dense = std::get_if<at::Tensor>(&value)) {
      parts.emplace_back(*dense, 0);
    } else {
      const ShardedTensor& st = std::get<ShardedTensor>(value);
      const int64_t row = st.sizes().size() > 1 ? st.sizes()[1] : 1;
      for (const Shard& shard : st.local_shards()) parts.emplace_back(shard.tensor, shard.metadata.offsets[0] * row);
    }
    for (const auto& [x, first] : parts) {
      const float* p = x.data_ptr<float>();
      for (int64_t k = 0; k < x.numel(); ++k) {
        if (p[k] != Value(t, first + k, salt)) return absl::InternalError(absl::StrCat(key, " differs at ", first + k));
      }
    }
    ++t;
  }
  return absl::OkStatus();
}

// Collectives this rank runs inside `body` (RunCollective arrivals).
template <typename F>
absl::StatusOr<int64_t> CountCollectives(RankContext& ctx, F&& body) {
  std::shared_ptr<RankMonitor> monitor = RankMonitor::Of(*ctx.pg);
  if (monitor == nullptr) return absl::InternalError("the simulator attached no rank monitor");
  const int64_t before = monitor->arrivals();
  absl::Status s = body();
  if (!s.ok()) return s;
  return monitor->arrivals() - before;
}

struct Counts {
  int64_t save = 0, load = 0;
};

// Saves and loads `n` tensors on `world` ranks; the collectives of each.
absl::StatusOr<std::vector<Counts>> SaveAndLoad(int n, int world, const std::string& dir) {
  simulate::ClusterOptions options = testing::Options();
  options.collective_timeout = std::chrono::seconds(120);  // rank 0 indexes 100,000 tensors unoptimised (fastbuild)
  SimulatedCluster cluster(world, options);
  return cluster.Run([&](RankContext& ctx) -> absl::StatusOr<Counts> {
    auto state = MakeMany(n, /*salt=*/3, ctx.pg);
    if (!state.ok()) return state.status();
    Counts c;
    const auto start = std::chrono::steady_clock::now();
    auto save = CountCollectives(ctx, [&] { return SaveCheckpoint(*state, dir, *ctx.pg); });
    const auto saved = std::chrono::steady_clock::now();
    if (!save.ok()) return save.status();
    c.save = *save;
    auto target = MakeMany(n, /*salt=*/1, ctx.pg);
    if (!target.ok()) return target.status();
    const auto loaded = std::chrono::steady_clock::now();
    auto load = CountCollectives(ctx, [&] { return LoadCheckpoint(*target, dir, *ctx.pg); });
    if (!load.ok()) return load.status();
    c.load = *load;
    if (ctx.rank == 0) {  // for the log: where a slow run spends its time
      std::cout << n << " tensors, W=" << world << ": save "
                << std::chrono::duration<double>(saved - start).count() << " s, load "
                << std::chrono::duration<double>(std::chrono::steady_clock::now() - loaded).count() << " s\n";
    }
    absl::Status s = CheckMany(*target, /*salt=*/3);
    if (!s.ok()) return s;
    return c;
  });
}

TEST(CheckpointScaleTest, CollectivesPerSaveAndLoadDoNotGrowWithTensorCount) {
  for (int world : {1, 3, 16}) {  // 16: the records' gather to rank 0 among many ranks
    auto few = SaveAndLoad(10, world, testing::FreshDir(absl::StrCat("few_", world)));
    ASSERT_TRUE(few.ok()) << few.status();
    auto many = SaveAndLoad(2000, world, testing::FreshDir(absl::StrCat("many_", world)));
    ASSERT_TRUE(many.ok()) << many.status();
    for (int r = 0; r < world; ++r) {
      SCOPED_TRACE(absl::StrCat("W=", world, " rank ", r));
      EXPECT_GT((*few)[r].save, 0);
      EXPECT_GT((*few)[r].load, 0);
      EXPECT_EQ((*few)[r].save, (*many)[r].save);
      EXPECT_EQ((*few)[r].load, (*many)[r].load);
    }
  }
}

TEST(CheckpointScaleTest, HundredThousandSmallTensorsRoundTrip) {
  const std::string dir = testing::FreshDir("hundred_thousand");
  auto counts = SaveAndLoad(100000, 3, dir);
  ASSERT_TRUE(counts.ok()) << counts.status();
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint
