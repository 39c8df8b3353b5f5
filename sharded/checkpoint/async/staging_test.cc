// StagingArea (staging.h): Reserve makes slots ahead of a save, within the
// budget; tensors are packed into shared slots; staged bytes come out in
// order whatever the slots were made by, and no slot is reused early.
#include "sharded/checkpoint/async/staging.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

namespace shardlight::sharded::checkpoint {
namespace {

constexpr int64_t kBudget = int64_t{1} << 20;  // four 256 KiB slots

TEST(StagingAreaTest, ReserveMakesWholeSlotsUpToTheBytesAsked) {
  StagingArea area(kBudget);
  ASSERT_EQ(area.piece_bytes(), kBudget / 4);
  EXPECT_EQ(area.allocated_bytes(), 0);
  area.Reserve(1);
  EXPECT_EQ(area.allocated_bytes(), area.piece_bytes());
  area.Reserve(area.piece_bytes() * 2 + 1);
  EXPECT_EQ(area.allocated_bytes(), area.piece_bytes() * 3);
  area.Reserve(area.piece_bytes());  // never shrinks
  EXPECT_EQ(area.allocated_bytes(), area.piece_bytes() * 3);
  area.Reserve(0);
  area.Reserve(-5);
  EXPECT_EQ(area.allocated_bytes(), area.piece_bytes() * 3);
}

TEST(StagingAreaTest, ReserveNeverExceedsTheBudget) {
  StagingArea area(kBudget);
  area.Reserve(kBudget * 10);
  EXPECT_EQ(area.allocated_bytes(), kBudget);
}

// Stages `tensors` on this thread while a writer thread drains them; returns
// the bytes the writer saw, entry by entry.
std::vector<std::vector<char>> StageAndDrain(StagingArea& area, const std::vector<at::Tensor>& tensors) {
  std::vector<std::vector<char>> seen(tensors.size());
  std::thread writer([&] {
    area.WaitUntilDraining();  // as the background save does before its first agreement
    for (size_t i = 0; i < tensors.size(); ++i) {
      const int64_t want = tensors[i].numel() * static_cast<int64_t>(tensors[i].element_size());
      int64_t got = 0;
      while (got < want) {
        auto piece = area.Next(i);
        ASSERT_TRUE(piece.ok()) << piece.status();
        seen[i].insert(seen[i].end(), piece->data, piece->data + piece->size);
        got += piece->size;
        area.Release();
      }
    }
  });
  EXPECT_TRUE(area.StageAll(tensors).ok());
  area.Seal();
  writer.join();
  return seen;
}

TEST(StagingAreaTest, ReservedSlotsCarryAStateLargerThanTheBudget) {
  StagingArea area(kBudget);
  area.Reserve(kBudget);
  area.Reset();
  const std::vector<at::Tensor> tensors = {at::arange(700000, at::kInt), at::arange(3, at::kDouble),
                                           at::arange(200000, at::kLong).reshape({400, 500}).t()};
  const auto seen = StageAndDrain(area, tensors);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor c = tensors[i].contiguous();
    ASSERT_EQ(seen[i].size(), static_cast<size_t>(c.numel() * c.element_size())) << i;
    EXPECT_EQ(std::memcmp(seen[i].data(), c.data_ptr(), seen[i].size()), 0) << i;
  }
  EXPECT_EQ(area.allocated_bytes(), kBudget);
}

TEST(StagingAreaTest, ReserveBesideAStagingSaveKeepsEveryByte) {
  for (int round = 0; round < 20; ++round) {
    StagingArea area(kBudget);
    area.Reset();
    std::thread reserver([&] { area.Reserve(kBudget); });
    const std::vector<at::Tensor> tensors = {at::arange(300000 + round, at::kInt)};
    const auto seen = StageAndDrain(area, tensors);
    reserver.join();
    ASSERT_EQ(seen[0].size(), static_cast<size_t>(tensors[0].numel() * 4));
    EXPECT_EQ(std::memcmp(seen[0].data(), tensors[0].data_ptr(), seen[0].size()), 0);
    EXPECT_LE(area.allocated_bytes(), kBudget);
  }
}

TEST(StagingAreaTest, PackedBytesCountsAlignedPiecesNotSlotsPerTensor) {
  StagingArea area(kBudget);
  const int64_t piece = area.piece_bytes();
  EXPECT_EQ(area.PackedBytes({}), 0);
  EXPECT_EQ(area.PackedBytes({100}), 128);
  EXPECT_EQ(area.PackedBytes({piece}), piece);
  EXPECT_EQ(area.PackedBytes({piece + 1}), piece + 64);
  EXPECT_EQ(area.PackedBytes(std::vector<int64_t>(1000, 100)), 128000);
  EXPECT_EQ(area.PackedBytes({0, 64, 0, 1}), 128);
}

// What a snapshot filled, as the next save's Reserve is told: the packed
// size, including pieces of one tensor across slots and reused slots.
TEST(StagingAreaTest, StagedBytesIsThePackedSizeOfTheSnapshot) {
  StagingArea area(kBudget);
  area.Reset();
  EXPECT_EQ(area.staged_bytes(), 0);
  const std::vector<at::Tensor> small = {at::arange(25, at::kInt), at::arange(3, at::kDouble)};
  ASSERT_TRUE(area.StageAll(small).ok());
  EXPECT_EQ(area.staged_bytes(), area.PackedBytes({100, 24}));
  // Past the budget: the writer drains, slots are reused, the count goes on.
  area.Reset();
  std::vector<at::Tensor> tensors;
  std::vector<int64_t> bytes;
  for (int i = 0; i < 40; ++i) {
    tensors.push_back(at::arange(10000 + 999 * i, at::kInt));
    bytes.push_back(tensors.back().numel() * 4);
  }
  tensors.push_back(at::arange(300000, at::kLong));  // 2.4 MB: more than the whole budget
  bytes.push_back(2400000);
  const auto seen = StageAndDrain(area, tensors);
  ASSERT_EQ(seen.size(), tensors.size());
  EXPECT_EQ(area.staged_bytes(), area.PackedBytes(bytes));
  EXPECT_GT(area.staged_bytes(), kBudget);
  EXPECT_LE(area.allocated_bytes(), kBudget);
}

// Pieces of every length around the 64-byte steps of the copy, at every
// alignment of the source: the bytes arrive whole.
TEST(StagingAreaTest, EveryPieceLengthAndSourceAlignmentCopiesExactly) {
  StagingArea area(kBudget);
  area.Reset();
  at::Generator gen = at::detail::createCPUGenerator(11);
  const at::Tensor pool = at::randint(0, 256, {1 << 16}, gen, at::kByte);
  std::vector<at::Tensor> tensors;
  for (int64_t len = 0; len <= 200; ++len) tensors.push_back(pool.narrow(0, len % 67, len));
  tensors.push_back(pool.narrow(0, 3, 5000));
  const auto seen = StageAndDrain(area, tensors);
  for (size_t i = 0; i < tensors.size(); ++i) {
    ASSERT_EQ(seen[i].size(), static_cast<size_t>(tensors[i].numel())) << i;
    EXPECT_EQ(std::memcmp(seen[i].data(), tensors[i].data_ptr(), seen[i].size()), 0) << i;
  }
}

// Many small tensors share slots: a snapshot of 1,000 of them fits one slot,
// so staging it needs no writer at all (a slot per tensor would block after
// four). Bounded: a blocked Stage is aborted and the test fails.
TEST(StagingAreaTest, SmallTensorsShareSlots) {
  StagingArea area(kBudget);
  area.Reset();
  std::vector<at::Tensor> tensors;
  for (int i = 0; i < 1000; ++i) tensors.push_back(at::full({25}, i, at::kInt));
  std::promise<absl::Status> staged;
  std::thread producer([&] {
    absl::Status s;
    for (size_t i = 0; i < tensors.size() && s.ok(); ++i) s = area.Stage(i, tensors[i]);
    staged.set_value(s);
  });
  auto result = staged.get_future();
  const bool finished = result.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  if (!finished) area.Abort(absl::DeadlineExceededError("staging blocked"));
  producer.join();
  ASSERT_TRUE(finished) << "staging 1,000 tensors of 100 bytes blocked without a writer";
  EXPECT_TRUE(result.get().ok());
  EXPECT_EQ(area.allocated_bytes(), area.piece_bytes());
  // Once sealed, the writer finds every tensor's bytes, in order.
  area.Seal();
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto piece = area.Next(i);
    ASSERT_TRUE(piece.ok()) << piece.status();
    ASSERT_EQ(piece->size, 100);
    EXPECT_EQ(std::memcmp(piece->data, tensors[i].data_ptr(), 100), 0) << i;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(piece->data) % 64, 0u) << i;
    area.Release();
  }
}

// A snapshot that fits is copied with the writer idle: Next returns only
// once the area is sealed.
TEST(StagingAreaTest, TheWriterWaitsForTheSealWhileThereIsRoom) {
  StagingArea area(kBudget);
  area.Reset();
  const at::Tensor t = at::arange(1000, at::kInt);
  ASSERT_TRUE(area.Stage(0, t).ok());
  std::atomic<bool> got{false};
  std::thread writer([&] {
    area.WaitUntilDraining();
    auto piece = area.Next(0);
    got = true;
    ASSERT_TRUE(piece.ok()) << piece.status();
    EXPECT_EQ(piece->size, 4000);
    area.Release();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(got) << "the writer drained an unsealed snapshot that fits the budget";
  area.Seal();
  writer.join();
  EXPECT_TRUE(got);
}

// Packed, non-contiguous and larger-than-a-slot tensors mixed, drained by a
// writer (which starts only when the producer runs out of room, then after
// the seal): every byte arrives, and a slot is reused only after its pieces
// were released (the bytes would differ otherwise).
TEST(StagingAreaTest, MixedTensorsThroughFewSlotsKeepEveryByte) {
  StagingArea area(StagingArea::kMinBudgetBytes);  // four 16 KiB slots
  area.Reset();
  std::vector<at::Tensor> tensors;
  at::Generator gen = at::detail::createCPUGenerator(7);
  for (int i = 0; i < 300; ++i) {
    const int64_t rows = 1 + (i * 37) % 50, cols = 1 + (i * 11) % 70;
    at::Tensor t = at::randint(0, 1 << 20, {rows, cols}, gen, at::kInt);
    tensors.push_back(i % 3 == 0 ? t.t() : t);  // every third one non-contiguous
  }
  tensors.push_back(at::arange(40000, at::kLong));  // 320 KB: many slots
  const auto seen = StageAndDrain(area, tensors);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor c = tensors[i].contiguous();
    ASSERT_EQ(seen[i].size(), static_cast<size_t>(c.numel() * c.element_size())) << i;
    EXPECT_EQ(std::memcmp(seen[i].data(), c.data_ptr(), seen[i].size()), 0) << i;
  }
  EXPECT_LE(area.allocated_bytes(), StagingArea::kMinBudgetBytes);
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint
