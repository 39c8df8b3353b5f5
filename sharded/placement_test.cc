#include "sharded/placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace shardlight::sharded {
namespace {

using ::testing::HasSubstr;

TEST(PlacementTest, ParsesAndFormatsCpuAndCuda) {
  auto cpu = ParsePlacement("rank:3/cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(cpu->rank, 3);
  EXPECT_EQ(cpu->device, DeviceKind::kCpu);
  EXPECT_EQ(cpu->ToString(), "rank:3/cpu");

  auto cuda = ParsePlacement("rank:12/cuda:7");
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  EXPECT_EQ(cuda->rank, 12);
  EXPECT_EQ(cuda->device, DeviceKind::kCuda);
  EXPECT_EQ(cuda->device_index, 7);
  EXPECT_EQ(cuda->ToString(), "rank:12/cuda:7");
  EXPECT_EQ(cuda->DeviceString(), "cuda:7");
  EXPECT_EQ(*ParsePlacement(cuda->ToString()), *cuda);
}

TEST(PlacementTest, MalformedStringsAreQuotedInTheError) {
  for (const char* bad : {"", "rank:", "rank:1", "rank:1/", "rank:-1/cpu", "rank:+1/cpu", "rank: 1/cpu",
                          "rank:1/gpu", "rank:1/cuda", "rank:1/cuda:", "rank:1/cuda:x", "rank:1/cpu ",
                          "rnk:1/cpu", "rank:99999999999/cpu", "rank:1/cuda:-2", "rank:1/cpu/cpu"}) {
    auto p = ParsePlacement(bad);
    ASSERT_FALSE(p.ok()) << "accepted \"" << bad << "\"";
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(std::string("\"") + bad + "\"")) << bad;
  }
}

TEST(PlacementTest, ControlCharactersAreEscapedNotPrinted) {
  auto p = ParsePlacement(std::string("rank:1/\n\x01", 9));
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("\\n\\x01"));
}

}  // namespace
}  // namespace shardlight::sharded
