#include "lightning/gate/torch_version.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace shardlight::lightning {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TorchVersion V(const std::string& s) {
  absl::StatusOr<TorchVersion> v = ParseTorchVersion(s);
  EXPECT_TRUE(v.ok()) << s << ": " << v.status();
  return v.ok() ? *v : TorchVersion();
}

TEST(TorchVersionTest, ParsesRealTorchVersionStrings) {
  TorchVersion ngc = V("1.10.0a0+ecc3718");
  EXPECT_THAT(ngc.release(), ElementsAre(1, 10, 0));
  ASSERT_TRUE(ngc.pre().has_value());
  EXPECT_EQ(ngc.pre()->kind, TorchVersion::PreKind::kAlpha);
  EXPECT_EQ(ngc.pre()->number, 0);
  EXPECT_EQ(ngc.Local(), "ecc3718");
  EXPECT_FALSE(ngc.dev().has_value());

  TorchVersion nightly = V("1.10.0.dev20210809");
  EXPECT_EQ(nightly.dev(), 20210809);
  EXPECT_FALSE(nightly.pre().has_value());

  TorchVersion rc = V("2.0.0rc1");
  EXPECT_EQ(rc.pre()->kind, TorchVersion::PreKind::kRc);
  EXPECT_EQ(rc.pre()->number, 1);

  EXPECT_EQ(V("2.1.0+cu121").Local(), "cu121");
  EXPECT_EQ(V("2.4.0a0+3bcc3cddb5").Local(), "3bcc3cddb5");
  EXPECT_EQ(V("1.13.1").Micro(), 1);
  EXPECT_EQ(V("1.0.post2").post(), 2);
  EXPECT_EQ(V("1!2.0").epoch(), 1);
  EXPECT_THAT(V("1.2.3.4.5").release(), ElementsAre(1, 2, 3, 4, 5));
  EXPECT_THAT(V("7").release(), ElementsAre(7));
}

TEST(TorchVersionTest, ToStringRoundTrips) {
  for (const char* s : {"1.13.0", "1.13.1", "1.10.0a0+ecc3718", "1.10.0.dev20210809", "2.0.0rc1", "2.1.0+cu121",
                        "2.4.0a0+3bcc3cddb5", "1.0b2.post3.dev4+ubuntu.1", "3!1.0", "1.10"}) {
    EXPECT_EQ(V(s).ToString(), s);
  }
  EXPECT_EQ(V("1.0+Ubuntu-1_2").ToString(), "1.0+ubuntu.1.2");  // PEP 440 local normalisation
  EXPECT_EQ(V(" 1.13.0\n").ToString(), "1.13.0");               // surrounding whitespace is allowed
}

TEST(TorchVersionTest, PreAndDevReleaseFlags) {
  struct Case {
    const char* version;
    bool pre;
    bool dev;
  };
  for (const Case& c : std::vector<Case>{{"1.13.0", false, false},
                                         {"1.10.0a0+ecc3718", true, false},
                                         {"1.10.0.dev20210809", true, true},
                                         {"2.0.0rc1", true, false},
                                         {"2.1.0+cu121", false, false},
                                         {"1.0.post1", false, false},
                                         {"1.0.post1.dev2", true, true}}) {
    EXPECT_EQ(V(c.version).IsPreRelease(), c.pre) << c.version;
    EXPECT_EQ(V(c.version).IsDevRelease(), c.dev) << c.version;
  }
}

// Strictly increasing by PEP 440; every pair is checked both ways.
TEST(TorchVersionTest, OrderingTable) {
  const std::vector<std::string> ascending = {
      "1.9.0",
      "1.10.0.dev20210809",
      "1.10.0a0.dev1",
      "1.10.0a0",
      "1.10.0a0+ecc3718",
      "1.10.0a1",
      "1.10.0b1",
      "1.10.0rc1",
      "1.10.0rc2",
      "1.10.0",
      "1.10.0+abc",
      "1.10.0+abc.1",
      "1.10.0+cu113",
      "1.10.0+cu121",
      "1.10.0+9",
      "1.10.0+10",
      "1.10.0.post1.dev1",
      "1.10.0.post1",
      "1.10.1",
      "1.13.0",
      "1.13.1",
      "2.0.0rc1",
      "2.0.0",
      "2.1.0",
      "2.1.0+cu121",
      "2.4.0a0+3bcc3cddb5",
      "2.4.0",
      "10.0",
      "1!0.1",
  };
  for (size_t i = 0; i < ascending.size(); ++i) {
    for (size_t j = 0; j < ascending.size(); ++j) {
      TorchVersion a = V(ascending[i]), b = V(ascending[j]);
      EXPECT_EQ(a < b, i < j) << ascending[i] << " < " << ascending[j];
      EXPECT_EQ(a == b, i == j) << ascending[i] << " == " << ascending[j];
      EXPECT_EQ(a >= b, i >= j) << ascending[i] << " >= " << ascending[j];
    }
  }
}

TEST(TorchVersionTest, EqualityFollowsPep440) {
  EXPECT_EQ(V("1.13"), V("1.13.0"));
  EXPECT_EQ(V("1.13.0.0"), V("1.13"));
  EXPECT_EQ(V("1.01"), V("1.1"));
  EXPECT_EQ(V("1.0+ABC"), V("1.0+abc"));
  EXPECT_NE(V("1.0+abc"), V("1.0"));
  EXPECT_NE(V("1.10.0a0"), V("1.10.0"));
}

TEST(TorchVersionTest, BaseVersionDropsEverythingButTheRelease) {
  EXPECT_EQ(V("1.10.0a0+ecc3718").BaseVersion().ToString(), "1.10.0");
  EXPECT_EQ(V("1.10.0.dev20210809").BaseVersion(), V("1.10.0"));
  EXPECT_EQ(V("2.1.0+cu121").BaseVersion(), V("2.1.0"));
}

TEST(TorchVersionTest, RejectsMalformedStringsQuotingThem) {
  struct Case {
    const char* input;
    const char* why;
  };
  for (const Case& c : std::vector<Case>{
           {"", "empty version string"},
           {"   ", "empty version string"},
           {"1..2", "empty release segment, found '.' at position 2"},
           {"1.", "empty release segment, found at the end"},
           {"abc", "expected a release number, found 'a' at position 0"},
           {"v1.13.0", "expected a release number"},
           {"1.13.0+", "empty local label segment, found at the end"},
           {"1.0+abc.", "empty local label segment"},
           {"1.0+a b", "unexpected ' ' at position 5"},
           {"1.x", "unexpected '.' at position 1"},
           {"1.13.x-internal", "unexpected '.' at position 4"},
           {"1.0a", "pre-release 'a' needs a number"},
           {"1.0rc", "pre-release 'rc' needs a number"},
           {"1.0.post", "post-release needs a number"},
           {"1.0.dev", "dev release needs a number"},
           {"1.0rc1rc2", "unexpected 'r'"},
           {"1.0.dev1.post1", "unexpected '.'"},
           {"1!", "expected a release after the epoch"},
           {"1.9223372036854775808", "release number is larger than 2^63 - 1"},
           {"1.0a99999999999999999999", "pre-release 'a' number is larger than 2^63 - 1"},
       }) {
    absl::StatusOr<TorchVersion> v = ParseTorchVersion(c.input);
    ASSERT_FALSE(v.ok()) << "accepted \"" << c.input << "\" as " << v->ToString();
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << c.input;
    EXPECT_THAT(std::string(v.status().message()), HasSubstr(std::string("\"") + c.input + "\"")) << c.input;
    EXPECT_THAT(std::string(v.status().message()), HasSubstr(c.why)) << c.input;
  }
}

// Issue 15, defect 12.
TEST(TorchVersionTest, NumbersUpToInt64MaxParse) {
  auto v = ParseTorchVersion("9223372036854775807.0");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->ToString(), "9223372036854775807.0");
  auto zeros = ParseTorchVersion("1.0000000000000000000000002");  // 25 digits, value 2
  ASSERT_TRUE(zeros.ok()) << zeros.status();
  EXPECT_EQ(zeros->ToString(), "1.2");
}

TEST(TorchVersionTest, CanonicalLocalLabelDropsLeadingZerosOfNumbers) {
  auto v = ParseTorchVersion("1.10.0+00");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->ToString(), "1.10.0+0");
  v = ParseTorchVersion("1.10.0+cu0113.007.ab0");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->ToString(), "1.10.0+cu0113.7.ab0");
}

TEST(TorchVersionTest, ErrorsEscapeTheOffendingByte) {
  auto v = ParseTorchVersion("1.0\xff");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("unexpected '\\xff' at position 3"));
}

}  // namespace
}  // namespace shardlight::lightning
