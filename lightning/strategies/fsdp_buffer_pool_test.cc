#include "lightning/strategies/fsdp_buffer_pool.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <vector>

namespace shardlight::lightning::fsdp_internal {
namespace {

const int64_t kPage = sysconf(_SC_PAGESIZE);

TEST(BufferPoolTest, AReleasedBlockServesTheNextRequestOfItsSize) {
  BufferPool pool;
  void* first = nullptr;
  {
    at::Tensor t = pool.Empty({1000}, at::kFloat);
    first = t.data_ptr();
    EXPECT_EQ(pool.free_bytes(), 0);
  }
  EXPECT_EQ(pool.free_bytes(), kPage);  // 4000 bytes, page-rounded
  at::Tensor again = pool.Empty({500, 2}, at::kFloat);  // the same bytes
  EXPECT_EQ(again.data_ptr(), first);
  at::Tensor other = pool.Empty({1000}, at::kDouble);  // another size: a new block
  EXPECT_NE(other.data_ptr(), first);
  EXPECT_EQ(pool.mapped_bytes(), kPage + 2 * kPage);
}

// What FSDP does every step: a few buffers of a few sizes, taken and
// released. After the first round nothing more is mapped.
TEST(BufferPoolTest, RepeatedRoundsMapOnlyTheLargestLiveSet) {
  BufferPool pool;
  const std::vector<int64_t> sizes = {3 << 20, 1 << 18, 3 << 20, 12345};
  int64_t after_first = 0;
  for (int round = 0; round < 50; ++round) {
    std::vector<at::Tensor> live;
    for (int64_t numel : sizes) {
      live.push_back(pool.Empty({numel}, at::kFloat));
      live.back().fill_(static_cast<float>(round));
      // At most two live at once, as a prefetching schedule holds.
      if (live.size() > 2) live.erase(live.begin());
    }
    live.clear();
    if (round == 0) after_first = pool.mapped_bytes();
    EXPECT_EQ(pool.mapped_bytes(), after_first) << "round " << round;
    EXPECT_EQ(pool.free_bytes(), after_first) << "round " << round;
  }
  auto rounded = [](int64_t bytes) { return (bytes + kPage - 1) / kPage * kPage; };
  // Two of 12 MiB (the second taken while the first was live), one of each other size.
  EXPECT_EQ(after_first, 2 * rounded(int64_t{12} << 20) + rounded(int64_t{1} << 20) + rounded(12345 * 4));
}

TEST(BufferPoolTest, ReleaseFreeUnmapsOnlyTheFreeBlocks) {
  BufferPool pool;
  at::Tensor kept = pool.Empty({1 << 12}, at::kFloat);
  pool.Empty({1 << 13}, at::kFloat);  // released at once: free
  EXPECT_EQ(pool.free_bytes(), (1 << 13) * 4);
  pool.ReleaseFree();
  EXPECT_EQ(pool.free_bytes(), 0);
  EXPECT_EQ(pool.mapped_bytes(), (1 << 12) * 4);
  kept.fill_(1);  // still mapped
  EXPECT_EQ(kept.sum().item<double>(), 1 << 12);
  kept = at::Tensor();
  EXPECT_EQ(pool.free_bytes(), (1 << 12) * 4);  // back in the pool
}

TEST(BufferPoolTest, TensorsAreContiguousWritableAndOfTheirDtype) {
  BufferPool pool;
  at::Tensor t = pool.Empty({3, 4, 5}, at::kDouble);
  EXPECT_EQ(t.sizes(), at::IntArrayRef({3, 4, 5}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.scalar_type(), at::kDouble);
  t.copy_(at::arange(60, at::kDouble).view({3, 4, 5}));
  EXPECT_TRUE(at::equal(t.view({-1}), at::arange(60, at::kDouble)));
  EXPECT_FALSE(t.requires_grad());
}

TEST(BufferPoolTest, ZeroBytesTakeNoBlock) {
  BufferPool pool;
  at::Tensor t = pool.Empty({0, 7}, at::kFloat);
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(pool.mapped_bytes(), 0);
  EXPECT_EQ(pool.Take(0).get(), nullptr);
}

// A storage that outlives its pool stays usable and is unmapped on release.
TEST(BufferPoolTest, ABlockOutlivesItsPool) {
  at::Tensor kept;
  {
    auto pool = std::make_unique<BufferPool>();
    kept = pool->Empty({1 << 16}, at::kFloat);
    at::Tensor freed = pool->Empty({1 << 10}, at::kFloat);
  }
  kept.fill_(2.5);
  EXPECT_EQ(kept.sum().item<double>(), 2.5 * (1 << 16));
  kept = at::Tensor();  // unmapped here, not returned to a pool that is gone
}

TEST(BufferPoolTest, EmptyFromUsesThePoolOnlyOnTheCpu) {
  BufferPool pool;
  at::Tensor pooled = EmptyFrom(&pool, {64}, at::TensorOptions().dtype(at::kFloat));
  EXPECT_EQ(pool.mapped_bytes(), kPage);
  at::Tensor plain = EmptyFrom(nullptr, {64}, at::TensorOptions().dtype(at::kFloat));
  EXPECT_EQ(pool.mapped_bytes(), kPage);
  EXPECT_EQ(plain.numel(), 64);
}

}  // namespace
}  // namespace shardlight::lightning::fsdp_internal
