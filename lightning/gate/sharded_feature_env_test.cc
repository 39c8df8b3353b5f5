// ShardedFeature() reads SHARDLIGHT_DISABLE_SHARDED once, at its first call,
// and keeps that decision: this binary makes that first call itself.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "lightning/gate/feature_gate.h"

namespace shardlight::lightning {
namespace {

TEST(ShardedFeatureEnvTest, VariableAtFirstCallDecidesForTheProcess) {
  setenv(kDisableShardedEnv, "1", 1);
  const FeatureDecision& first = ShardedFeature();
  EXPECT_FALSE(first.sharded_supported);
  EXPECT_EQ(first.reason, "ShardedTensor state-dict hooks are off: SHARDLIGHT_DISABLE_SHARDED=1 is set");
  EXPECT_THAT(first.missing, ::testing::IsEmpty());  // this build lacks nothing

  unsetenv(kDisableShardedEnv);
  const FeatureDecision& later = ShardedFeature();
  EXPECT_EQ(&later, &first);
  EXPECT_FALSE(later.sharded_supported);
}

}  // namespace
}  // namespace shardlight::lightning
