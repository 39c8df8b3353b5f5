// SaveCheckpoint and LoadCheckpoint through S3Storage against a real S3
// server (SeaweedFS on loopback): the unchanged commit protocol on an object
// store. A save leaves exactly its objects (no temporaries, no unfinished
// uploads), loads reshard on another world size, and a second save into the
// same location replaces the first and removes its objects.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/storage/s3/s3_storage.h"
#include "sharded/checkpoint/storage/s3/testing/seaweedfs_test.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded::checkpoint {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;

std::vector<testing::TensorSpec> Model(int world) {
  return {{"layer.weight", {37, 11}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(0, world)},
          {"layer.bias", {11}, c10::ScalarType::BFloat16, std::nullopt},
          {"embedding", {64, 6}, c10::ScalarType::Half, ChunkShardingSpec::OnRanks(1, world)},
          {"step", {}, c10::ScalarType::Long, std::nullopt}};
}

// Saves the reference dict of `salt` on `save_world` ranks (salt >= 0), or
// loads into sentinels on `world` ranks and checks every value (load = true).
absl::Status OnCluster(const std::shared_ptr<Storage>& storage, const std::string& dir, int world, int salt, bool load) {
  SimulatedCluster cluster(world, testing::Options());
  return cluster.Run([&](RankContext& ctx) -> absl::Status {
    auto state = testing::MakeState(Model(world), load ? -1 : salt, ctx.pg);
    if (!state.ok()) return state.status();
    if (!load) {
      SaveOptions options;
      options.storage = storage;
      return SaveCheckpoint(*state, dir, *ctx.pg, options);
    }
    LoadOptions options;
    options.storage = storage;
    absl::Status s = LoadCheckpoint(*state, dir, *ctx.pg, options);
    return s.ok() ? testing::CheckState(*state, salt) : s;
  });
}

class S3CheckpointTest : public s3::testing::SeaweedFsTest {};

TEST_F(S3CheckpointTest, SaveAndLoadReshardThroughS3) {
  auto storage = std::make_shared<s3::S3Storage>(client_);
  const std::string dir = absl::StrCat("s3://", bucket_, "/run-1/step-10");

  absl::Status saved = OnCluster(storage, dir, 4, 1, /*load=*/false);
  ASSERT_TRUE(saved.ok()) << saved;
  EXPECT_TRUE(HasCommittedCheckpoint(dir, storage.get()));
  auto objects = client_->ListObjects(bucket_, "run-1/step-10/");
  ASSERT_TRUE(objects.ok()) << objects.status();
  std::vector<std::string> names;
  for (const s3::ObjectInfo& o : objects->objects) names.push_back(o.key.substr(std::string("run-1/step-10/").size()));
  // The directory marker, index.json and one data file per rank; nothing else.
  ASSERT_EQ(names.size(), 6u) << ::testing::PrintToString(names);
  EXPECT_EQ(std::count(names.begin(), names.end(), "index.json"), 1);
  for (const std::string& n : names) EXPECT_FALSE(absl::StrContains(n, ".tmp")) << n;
  EXPECT_TRUE(client_->ListMultipartUploads(bucket_, "")->empty());

  absl::Status loaded = OnCluster(storage, dir, 3, 1, /*load=*/true);
  EXPECT_TRUE(loaded.ok()) << loaded;

  // A second save replaces the first: only its files remain, and they load.
  saved = OnCluster(storage, dir, 2, 2, /*load=*/false);
  ASSERT_TRUE(saved.ok()) << saved;
  objects = client_->ListObjects(bucket_, "run-1/step-10/");
  ASSERT_TRUE(objects.ok());
  EXPECT_EQ(objects->objects.size(), 4u) << "marker, index.json and two data files";
  loaded = OnCluster(storage, dir, 4, 2, /*load=*/true);
  EXPECT_TRUE(loaded.ok()) << loaded;
}

TEST_F(S3CheckpointTest, LoadingWhereNothingWasSavedSaysSo) {
  auto storage = std::make_shared<s3::S3Storage>(client_);
  const std::string dir = absl::StrCat("s3://", bucket_, "/never-saved");
  EXPECT_FALSE(HasCommittedCheckpoint(dir, storage.get()));
  const absl::Status loaded = OnCluster(storage, dir, 2, 1, /*load=*/true);
  EXPECT_TRUE(absl::IsNotFound(loaded)) << loaded;
  EXPECT_TRUE(absl::StrContains(loaded.message(), dir)) << loaded;
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint
