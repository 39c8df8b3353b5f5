// JoinReadRanges: which GETs fetch a load's announced byte ranges.
#include "sharded/checkpoint/storage/s3/read_ranges.h"

#include <algorithm>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardlight::sharded::checkpoint::s3 {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using R = ReadRange;

constexpr int64_t kBig = int64_t{1} << 40;

TEST(JoinReadRangesTest, JoinsRangesAtMostTheGapApart) {
  // Gaps of 0, 10 (= the threshold) and 11 (over it).
  EXPECT_THAT(JoinReadRanges({{0, 10}, {10, 20}, {30, 40}, {51, 60}}, kBig, 10, kBig),
              ElementsAre(R{0, 40}, R{51, 60}));
  EXPECT_THAT(JoinReadRanges({{0, 10}, {10, 20}, {30, 40}}, kBig, 0, kBig), ElementsAre(R{0, 20}, R{30, 40}))
      << "without a gap allowance only touching ranges join";
}

TEST(JoinReadRangesTest, OverlappingAndContainedRangesAreFetchedOnce) {
  EXPECT_THAT(JoinReadRanges({{0, 10}, {5, 15}, {2, 3}, {14, 30}, {0, 30}}, kBig, 0, kBig), ElementsAre(R{0, 30}));
  // The cap cuts after 10; the overlap of [5, 15) with the first GET is not
  // fetched again.
  EXPECT_THAT(JoinReadRanges({{0, 10}, {5, 15}}, kBig, 0, 10), ElementsAre(R{0, 10}, R{10, 15}));
  EXPECT_THAT(JoinReadRanges({{0, 10}, {5, 15}, {6, 9}, {10, 12}}, kBig, 0, 10), ElementsAre(R{0, 10}, R{10, 15}));
}

TEST(JoinReadRangesTest, SortsRangesGivenInAnyOrder) {
  EXPECT_THAT(JoinReadRanges({{100, 110}, {0, 10}, {50, 60}, {12, 20}}, kBig, 4, kBig),
              ElementsAre(R{0, 20}, R{50, 60}, R{100, 110}));
}

TEST(JoinReadRangesTest, NoGetIsLongerThanTheCap) {
  // One long range is cut; small ranges fill a GET up to the cap and the
  // next starts where a range does, not in a gap.
  EXPECT_THAT(JoinReadRanges({{0, 25}}, kBig, 0, 10), ElementsAre(R{0, 10}, R{10, 20}, R{20, 25}));
  EXPECT_THAT(JoinReadRanges({{0, 4}, {5, 8}, {9, 12}, {13, 15}}, kBig, 1, 10),
              ElementsAre(R{0, 10}, R{10, 15}));
  EXPECT_THAT(JoinReadRanges({{0, 4}, {6, 9}, {11, 14}}, kBig, 2, 9), ElementsAre(R{0, 9}, R{11, 14}));
  EXPECT_THAT(JoinReadRanges({{0, 3}}, kBig, 0, 0), ElementsAre(R{0, 1}, R{1, 2}, R{2, 3})) << "a cap below 1 is 1";
}

TEST(JoinReadRangesTest, DropsEmptyRangesAndClipsToTheObject) {
  EXPECT_THAT(JoinReadRanges({}, kBig, 10, 10), IsEmpty());
  EXPECT_THAT(JoinReadRanges({{5, 5}, {9, 3}, {100, 120}, {-10, -2}}, 100, 10, 10), IsEmpty());
  EXPECT_THAT(JoinReadRanges({{-5, 4}, {5, 5}, {90, 130}}, 100, 0, kBig), ElementsAre(R{0, 4}, R{90, 100}));
  // An empty range in a gap joins nothing.
  EXPECT_THAT(JoinReadRanges({{0, 2}, {6, 6}, {10, 12}}, 100, 5, kBig), ElementsAre(R{0, 2}, R{10, 12}));
  EXPECT_THAT(JoinReadRanges({{0, 2}, {10, 12}}, 100, -3, kBig), ElementsAre(R{0, 2}, R{10, 12}))
      << "a negative gap is no gap";
}

// Random ranges: the GETs are sorted, disjoint, within the cap, cover every
// wanted byte, fetch no byte outside the ranges and their small gaps, and
// leave no two neighbours that the rules would have joined.
TEST(JoinReadRangesTest, RandomRangesKeepEveryRule) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t size = std::uniform_int_distribution<int64_t>(0, 300)(rng);
    const int64_t gap = std::uniform_int_distribution<int64_t>(0, 12)(rng);
    const int64_t cap = std::uniform_int_distribution<int64_t>(1, 60)(rng);
    std::vector<R> ranges(std::uniform_int_distribution<int>(0, 12)(rng));
    for (R& r : ranges) {
      r.first = std::uniform_int_distribution<int64_t>(-20, 320)(rng);
      r.second = r.first + std::uniform_int_distribution<int64_t>(-5, 50)(rng);
    }
    const std::vector<R> gets = JoinReadRanges(ranges, size, gap, cap);
    std::vector<int> wanted(static_cast<size_t>(size), 0), fetched(static_cast<size_t>(size), 0);
    for (const R& r : ranges) {
      for (int64_t b = std::max<int64_t>(0, r.first); b < std::min(size, r.second); ++b) wanted[b] = 1;
    }
    for (size_t i = 0; i < gets.size(); ++i) {
      ASSERT_LT(gets[i].first, gets[i].second) << "trial " << trial;
      ASSERT_LE(gets[i].second - gets[i].first, cap) << "trial " << trial;
      ASSERT_GE(gets[i].first, 0);
      ASSERT_LE(gets[i].second, size);
      if (i > 0) {
        ASSERT_LE(gets[i - 1].second, gets[i].first) << "trial " << trial << ": sorted and disjoint";
      }
      if (i > 0 && gets[i].first - gets[i - 1].second > 0) {
        // A hole between two GETs is more than the gap, or the earlier GET
        // was full.
        ASSERT_TRUE(gets[i].first - gets[i - 1].second > gap || gets[i - 1].second - gets[i - 1].first == cap ||
                    gets[i].first >= gets[i - 1].first + cap)
            << "trial " << trial << ": GETs " << i - 1 << " and " << i << " should have joined";
      }
      for (int64_t b = gets[i].first; b < gets[i].second; ++b) ++fetched[b];
    }
    // Every fetched byte is wanted or lies in a gap of at most `gap` between
    // wanted bytes.
    int64_t last_wanted = -1;
    for (int64_t b = 0; b < size; ++b) {
      ASSERT_LE(fetched[b], 1) << "trial " << trial << ": byte " << b << " fetched twice";
      if (wanted[b]) {
        ASSERT_EQ(fetched[b], 1) << "trial " << trial << ": byte " << b << " not fetched";
        last_wanted = b;
        continue;
      }
      if (!fetched[b]) continue;
      int64_t next_wanted = b;
      while (next_wanted < size && !wanted[next_wanted]) ++next_wanted;
      ASSERT_TRUE(last_wanted >= 0 && next_wanted < size && next_wanted - last_wanted - 1 <= gap)
          << "trial " << trial << ": byte " << b << " is in no small gap";
    }
  }
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint::s3
