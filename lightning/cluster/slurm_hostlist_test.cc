#include "lightning/cluster/slurm_hostlist.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardlight::lightning::cluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(SlurmHostlist, ExpandsRangesListsAndPadding) {
  EXPECT_THAT(*ExpandSlurmHostlist("node[01-04,07]"), ElementsAre("node01", "node02", "node03", "node04", "node07"));
  EXPECT_THAT(*ExpandSlurmHostlist("a1,b[2-3]-ib"), ElementsAre("a1", "b2-ib", "b3-ib"));
  EXPECT_THAT(*ExpandSlurmHostlist("rack[1-2]-n[01-02]"),
              ElementsAre("rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"));
  EXPECT_THAT(*ExpandSlurmHostlist("gpu[8-11]"), ElementsAre("gpu8", "gpu9", "gpu10", "gpu11"));
  EXPECT_THAT(*ExpandSlurmHostlist("n[098-101]"), ElementsAre("n098", "n099", "n100", "n101"));
  EXPECT_THAT(*ExpandSlurmHostlist("single"), ElementsAre("single"));
  EXPECT_THAT(*ExpandSlurmHostlist("x[5]"), ElementsAre("x5"));
}

TEST(SlurmHostlist, FirstHostWithoutExpandingEverything) {
  EXPECT_EQ(*FirstSlurmHost("node[01-04,07]"), "node01");
  EXPECT_EQ(*FirstSlurmHost("big[0-99999999]"), "big0");
  EXPECT_EQ(*FirstSlurmHost("c7,node[1-2]"), "c7");
  EXPECT_EQ(*FirstSlurmHost("rack[3-4]-n[07-09]"), "rack3-n07");
}

TEST(SlurmHostlist, BadListsNameThePosition) {
  for (const char* bad : {"", "node[01-04", "node01-04]", "node[04-01]", "node[a-b]", "a,,b", "node[]", "n[1-2[3]]",
                          "n[-1]", "bad host", "n[1-99999999999999999999]"}) {
    auto hosts = ExpandSlurmHostlist(bad);
    ASSERT_FALSE(hosts.ok()) << bad;
    EXPECT_EQ(hosts.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(hosts.status().message(), HasSubstr("bad Slurm host list")) << bad;
    EXPECT_FALSE(FirstSlurmHost(bad).ok()) << bad;
  }
  EXPECT_THAT(ExpandSlurmHostlist("node[04-01]").status().message(), HasSubstr("descends"));
}

TEST(SlurmHostlist, ExpansionIsBounded) {
  auto hosts = ExpandSlurmHostlist("n[0-999999999]", 1000);
  ASSERT_FALSE(hosts.ok());
  EXPECT_EQ(hosts.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ExpandSlurmHostlist("n[0-999]", 1000)->size(), 1000u);
}

}  // namespace
}  // namespace shardlight::lightning::cluster
