// The checks behind ParseFlagsOrExit, one argument at a time.
#include "flags/strict_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "absl/flags/flag.h"

ABSL_FLAG(int32_t, width, 3, "a test flag");
ABSL_FLAG(bool, fast, false, "a test flag");

namespace shardlight::tools::flags {
namespace {

using ::testing::HasSubstr;

TEST(StrictFlagsTest, AcceptsKnownFlagsPositionalsAndAbseilsOwn) {
  EXPECT_EQ(CheckFlagArgument("--width=5"), "");
  EXPECT_EQ(CheckFlagArgument("--fast"), "");
  EXPECT_EQ(CheckFlagArgument("--nofast"), "");
  EXPECT_EQ(CheckFlagArgument("positional"), "");
  EXPECT_EQ(CheckFlagArgument("--help"), "");
  EXPECT_EQ(absl::GetFlag(FLAGS_width), 3) << "checking must not set the flag";
}

TEST(StrictFlagsTest, NamesWhatIsWrong) {
  EXPECT_EQ(CheckFlagArgument("--wdith=5"), "unknown flag '--wdith' (see --help)");
  EXPECT_EQ(CheckFlagArgument("--width"), "flag '--width' needs a value: --width=VALUE");
  EXPECT_THAT(CheckFlagArgument("--width=wide"), HasSubstr("bad value 'wide' for --width"));
  EXPECT_EQ(absl::GetFlag(FLAGS_width), 3);
}

}  // namespace
}  // namespace shardlight::tools::flags
