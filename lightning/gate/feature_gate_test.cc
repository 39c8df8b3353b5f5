#include "lightning/gate/feature_gate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <set>
#include <string>

#include "lightning/gate/simulated_builds.h"

namespace shardlight::lightning {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const SimulatedBuild& Find(const std::vector<SimulatedBuild>& builds, const std::string& name) {
  for (const SimulatedBuild& b : builds) {
    if (b.name == name) return b;
  }
  ADD_FAILURE() << "no simulated build " << name;
  return builds.front();
}

class GateMatrixTest : public ::testing::TestWithParam<size_t> {};

TEST_P(GateMatrixTest, DecisionMatchesExpectation) {
  const std::vector<SimulatedBuild> builds = SimulatedBuilds();
  const SimulatedBuild& sim = builds.at(GetParam());
  FeatureDecision d = Decide(sim);
  EXPECT_EQ(d.sharded_supported, sim.expected.sharded_supported) << d.reason;
  EXPECT_EQ(d.missing, sim.expected.missing) << d.reason;
  EXPECT_THAT(d.reason, HasSubstr(d.sharded_supported ? "hooks are on: " : "hooks are off: "));
  for (const std::string& text : sim.expected.reason_mentions) EXPECT_THAT(d.reason, HasSubstr(text));
  for (const std::string& text : sim.expected.note_mentions) EXPECT_THAT(d.version_note, HasSubstr(text));
  EXPECT_FALSE(d.version_note.empty());
}

INSTANTIATE_TEST_SUITE_P(SimulatedBuilds, GateMatrixTest, ::testing::Range<size_t>(0, SimulatedBuilds().size()),
                         [](const auto& info) {
                           std::string name = SimulatedBuilds()[info.param].name;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(SimulatedBuildsTest, CoverTheCasesTheGateMustTellApart) {
  const std::vector<SimulatedBuild> builds = SimulatedBuilds();
  EXPECT_GE(builds.size(), 8u);
  std::set<std::string> names;
  int on = 0, off = 0;
  for (const SimulatedBuild& b : builds) {
    EXPECT_TRUE(names.insert(b.name).second) << "duplicate " << b.name;
    EXPECT_FALSE(b.description.empty()) << b.name;
    (b.expected.sharded_supported ? on : off)++;
  }
  EXPECT_GE(on, 3);
  EXPECT_GE(off, 3);
  EXPECT_FALSE(Find(builds, "undescribable").build.ok());
  EXPECT_FALSE(Find(builds, "malformed-version").build->version().ok());
}

// The classic trap, spelled out: the version says yes, the capabilities no.
TEST(FeatureGateTest, NgcPreReleaseIsRefusedDespiteItsVersion) {
  const std::vector<SimulatedBuild> builds = SimulatedBuilds();
  const TorchBuild& ngc = *Find(builds, "ngc-21.07").build;
  ASSERT_TRUE(ngc.version().ok());
  EXPECT_GE(ngc.version()->Minor(), 10);  // what a naive check looks at
  Capabilities caps = CapabilitiesOf(ngc);
  EXPECT_EQ(caps.backend, C10dBackend::kNccl);
  EXPECT_TRUE(caps.c10d_backend && caps.headers_match_library && caps.allgather && caps.alltoall_base &&
              caps.broadcast && caps.barrier);
  EXPECT_FALSE(caps.gather);
  EXPECT_FALSE(caps.scatter);
  FeatureDecision d = DecideShardedSupport(ngc);
  EXPECT_FALSE(d.sharded_supported);
  EXPECT_EQ(d.reason, "ShardedTensor state-dict hooks are off: the nccl backend lacks gather, scatter");
  EXPECT_EQ(d.version_note,
            "1.10.0a0+ecc3718 is a pre-release (alpha 0) of 1.10.0, local label 'ecc3718' (NGC-style source build); "
            "a naive major.minor >= 1.10 check passes, a PEP 440 >= 1.10.0 check fails; a version check would have "
            "passed, but gather, scatter are missing");
}

TEST(FeatureGateTest, CpuBuildChoosesGlooAndNamesEveryCollective) {
  const std::vector<SimulatedBuild> builds = SimulatedBuilds();
  FeatureDecision d = DecideShardedSupport(*Find(builds, "debian-1.13-cpu").build);
  EXPECT_TRUE(d.sharded_supported);
  EXPECT_EQ(d.reason,
            "ShardedTensor state-dict hooks are on: the gloo backend implements allgather, alltoall_base, broadcast, "
            "gather, scatter, barrier");
  EXPECT_THAT(d.missing, IsEmpty());
}

TEST(FeatureGateTest, MissingListsOnlyWhatIsMissingInOrder) {
  Capabilities none;
  EXPECT_THAT(MissingCapabilities(none), ElementsAre("c10d_backend", "headers_match_library"));
  Capabilities gloo;
  gloo.backend = C10dBackend::kGloo;
  gloo.c10d_backend = gloo.headers_match_library = true;
  gloo.allgather = gloo.broadcast = gloo.gather = true;
  EXPECT_THAT(MissingCapabilities(gloo), ElementsAre("alltoall_base", "scatter", "barrier"));
}

TEST(FeatureGateTest, EnvironmentValuesThatDisable) {
  for (const char* value : {"1", "yes", "TRUE", "on", "anything"}) {
    EXPECT_TRUE(GateEnvironment{value}.DisablesSharded()) << value;
  }
  for (const char* value : {"", "0", "false", "No", " off "}) {
    EXPECT_FALSE(GateEnvironment{value}.DisablesSharded()) << value;
  }
  EXPECT_FALSE(GateEnvironment{}.DisablesSharded());
}

TEST(FeatureGateTest, EnvironmentOverridesACapableBuildAndSaysSo) {
  const std::vector<SimulatedBuild> builds = SimulatedBuilds();
  const TorchBuild& debian = *Find(builds, "debian-1.13-cpu").build;
  FeatureDecision off = DecideShardedSupport(debian, GateEnvironment{"yes"});
  EXPECT_FALSE(off.sharded_supported);
  EXPECT_EQ(off.reason, "ShardedTensor state-dict hooks are off: SHARDLIGHT_DISABLE_SHARDED=yes is set");
  EXPECT_THAT(off.missing, IsEmpty());
  FeatureDecision on = DecideShardedSupport(debian, GateEnvironment{"0"});
  EXPECT_TRUE(on.sharded_supported);
}

TEST(FeatureGateTest, FromProcessReadsTheVariable) {
  setenv(kDisableShardedEnv, "1", 1);
  EXPECT_EQ(GateEnvironment::FromProcess().disable_sharded, "1");
  unsetenv(kDisableShardedEnv);
  EXPECT_EQ(GateEnvironment::FromProcess().disable_sharded, std::nullopt);
}

// Debian's 1.13 CPU build decides on Gloo; the torch 2.x CUDA wheel on NCCL
// (compiled in and exported, whether or not this machine has a GPU).
TEST(FeatureGateTest, ThisMachinesBuildIsSupported) {
  unsetenv(kDisableShardedEnv);
  const FeatureDecision& d = ShardedFeature();
  EXPECT_TRUE(d.sharded_supported) << d.reason;
  EXPECT_THAT(d.reason, HasSubstr(SHARDLIGHT_EXPECT_CUDA ? "the nccl backend implements" : "the gloo backend implements"));
  EXPECT_THAT(d.missing, IsEmpty());
  EXPECT_THAT(d.version_note, HasSubstr(SHARDLIGHT_EXPECT_TORCH_VERSION));
  EXPECT_EQ(&d, &ShardedFeature());  // cached
}

}  // namespace
}  // namespace shardlight::lightning
