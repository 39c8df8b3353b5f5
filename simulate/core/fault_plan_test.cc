#include "simulate/core/fault_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace shardlight::simulate {
namespace {

using ::testing::HasSubstr;

TEST(FaultPlanTest, ParsesEveryKindAndPrintsItBack) {
  for (const char* text : {"crash:rank=1,step=3", "save-crash:rank=0,step=2", "delay:rank=2,step=1,ms=250",
                           "timeout:rank=3,step=7"}) {
    auto plan = ParseFaultPlan(text);
    ASSERT_TRUE(plan.ok()) << text << ": " << plan.status();
    EXPECT_EQ(plan->ToString(), text);
  }
  auto delay = ParseFaultPlan("delay:step=4,ms=10,rank=1");
  ASSERT_TRUE(delay.ok());
  EXPECT_EQ(delay->kind, FaultKind::kDelay);
  EXPECT_EQ(delay->rank, 1);
  EXPECT_EQ(delay->step, 4);
  EXPECT_EQ(delay->delay.count(), 10);
}

TEST(FaultPlanTest, MalformedPlansAreQuoted) {
  for (const char* text : {"", "crash", "crash:", "explode:rank=1,step=1", "crash:rank=1", "crash:step=1",
                           "crash:rank=-1,step=1", "crash:rank=1,step=0", "crash:rank=x,step=1",
                           "crash:rank=1,step=1,ms=5", "delay:rank=1,step=1", "crash:rank=1,rank=2,step=1",
                           "crash:rank=64,step=1", "crash:rank=1,step=1,", "delay:rank=1,step=1,ms=600001"}) {
    auto plan = ParseFaultPlan(text);
    ASSERT_FALSE(plan.ok()) << "accepted \"" << text << "\"";
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(plan.status().message()), HasSubstr(std::string("\"") + text + "\"")) << text;
  }
}

// Issue 15, defect 10: SimpleAtoi skips surrounding whitespace, so these
// once parsed; a plan must be exactly what the user meant.
TEST(FaultPlanTest, SpacesNewlinesAndOtherBytesAreRefusedEscaped) {
  const std::pair<std::string, std::string> cases[] = {
      {"crash:rank=1,step=2\n", "\"crash:rank=1,step=2\\n\": byte 19 is a space"},
      {"crash:rank=1,step= 2", "byte 18 is a space"},
      {" crash:rank=1,step=2", "byte 0 is a space"},
      {"crash:rank=1, step=2", "byte 13 is a space"},
      {"crash:rank=1,step=2\t", "byte 19 is a space, a control character"},
      {"crash:rank=1,step=\xc2\xb2", "\"crash:rank=1,step=\\xc2\\xb2\": byte 18"},
  };
  for (const auto& [text, want] : cases) {
    auto plan = ParseFaultPlan(text);
    ASSERT_FALSE(plan.ok()) << "accepted \"" << text << "\"";
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(plan.status().message()), HasSubstr(want));
  }
}

}  // namespace
}  // namespace shardlight::simulate
