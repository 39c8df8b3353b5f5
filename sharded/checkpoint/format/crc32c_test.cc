#include "sharded/checkpoint/format/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "sharded/checkpoint/format/block_checksums.h"

namespace shardlight::sharded::checkpoint {
namespace {

// Published check values of CRC-32C (RFC 3720, appendix B.4, and the
// "123456789" catalogue value).
TEST(Crc32cTest, KnownValues) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<unsigned char>(i);
    down[i] = static_cast<unsigned char>(31 - i);
  }
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(up.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(down.data(), 32), 0x113FDB5Cu);
  EXPECT_EQ(Crc32cExtendPortable(0, "123456789", 9), 0xE3069283u);
}

// The hardware path (when present) and the tables agree on every length and
// alignment, and extending in pieces equals one pass.
TEST(Crc32cTest, HardwareMatchesPortableAndExtendComposes) {
  std::mt19937 rng(7);
  std::vector<unsigned char> data(50000 + 64);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  for (size_t offset = 0; offset < 9; ++offset) {
    // Lengths around the three-stream stripes (3 x 4096 bytes) included.
    for (size_t n : {0, 1, 7, 8, 9, 31, 32, 33, 255, 1000, 4096, 12287, 12288, 12289, 24576 + 100, 50000}) {
      const uint32_t whole = Crc32c(data.data() + offset, n);
      ASSERT_EQ(whole, Crc32cExtendPortable(0, data.data() + offset, n)) << offset << " " << n;
      const size_t cut = n / 3;
      EXPECT_EQ(Crc32cExtend(Crc32cExtend(0, data.data() + offset, cut), data.data() + offset + cut, n - cut), whole);
    }
  }
  // One flipped bit changes the value.
  const uint32_t before = Crc32c(data.data(), 4096);
  data[1234] ^= 0x10;
  EXPECT_NE(Crc32c(data.data(), 4096), before);
}

// Every implementation this machine runs (the AVX-512 folding one included
// where the CPU has it) equals the tables, on lengths around its 256-byte
// steps and its 512-byte threshold, at every alignment, from any running CRC.
TEST(Crc32cTest, EveryImplementationMatchesPortable) {
  const auto& all = Crc32cImplementations();
  ASSERT_FALSE(all.empty());
  EXPECT_STREQ(all.back().name, "portable");
  EXPECT_STREQ(Crc32cImplementationName(), all.front().name);
  std::mt19937 rng(11);
  std::vector<unsigned char> data(70000 + 64);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  for (const Crc32cImplementation& impl : all) {
    SCOPED_TRACE(impl.name);
    EXPECT_EQ(impl.extend(0, "123456789", 9), 0xE3069283u);
    for (size_t offset : {0, 1, 5, 8, 63}) {
      for (size_t n : {0, 1, 255, 256, 257, 511, 512, 513, 767, 768, 1000, 1024, 4095, 12288, 65536, 70000}) {
        for (uint32_t start : {0u, 0xFFFFFFFFu, 0x1234ABCDu}) {
          ASSERT_EQ(impl.extend(start, data.data() + offset, n), Crc32cExtendPortable(start, data.data() + offset, n))
              << "offset " << offset << " length " << n << " from " << start;
        }
      }
    }
    // Each bit of a long message matters (the folding path's constants).
    const uint32_t before = impl.extend(0, data.data(), 4096);
    for (size_t bit : {0, 7, 8 * 127, 8 * 255 + 3, 8 * 256, 8 * 2000 + 5, 8 * 4095 + 7}) {
      data[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
      EXPECT_NE(impl.extend(0, data.data(), 4096), before) << "bit " << bit;
      EXPECT_EQ(impl.extend(0, data.data(), 4096), Crc32cExtendPortable(0, data.data(), 4096)) << "bit " << bit;
      data[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    }
  }
}

TEST(BlockChecksumsTest, BlocksIndependentOfChunking) {
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 + 7);
  std::vector<uint32_t> want;
  for (size_t pos = 0; pos < data.size(); pos += 128) {
    want.push_back(Crc32c(data.data() + pos, std::min<size_t>(128, data.size() - pos)));
  }
  ASSERT_EQ(want.size(), 8u);  // seven full blocks and a short one
  for (size_t chunk : {1, 5, 128, 129, 1000}) {
    BlockChecksums crcs(128);
    for (size_t pos = 0; pos < data.size(); pos += chunk) crcs.Update(data.data() + pos, std::min(chunk, data.size() - pos));
    EXPECT_EQ(crcs.Finish(), want) << "chunk " << chunk;
  }
  BlockChecksums exact(100);
  exact.Update(data.data(), 1000);
  EXPECT_EQ(exact.Finish().size(), 10u);  // no empty trailing block
  BlockChecksums none(100);
  EXPECT_TRUE(none.Finish().empty());
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint
