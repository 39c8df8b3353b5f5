// ckpt uploads against a real S3 server (SeaweedFS on loopback): a
// multipart upload left unfinished (as by a save that crashed) is listed
// with its key; --abort aborts it and the bucket has none left; an upload
// under another prefix is not touched; a local path is refused. A save whose
// server is KILLed in the middle of a multipart upload leaves the previous
// checkpoint loadable and an upload that ckpt uploads lists and aborts.
#include "tools/ckpt/upload_commands.h"

#include <gtest/gtest.h>

#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/storage/s3/s3_storage.h"
#include "sharded/checkpoint/storage/s3/testing/s3_front.h"
#include "sharded/checkpoint/storage/s3/testing/seaweedfs_test.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::tools::ckpt {
namespace {

class UploadsTest : public sharded::checkpoint::s3::testing::SeaweedFsTest {};

TEST_F(UploadsTest, ListsAndAbortsTheUnfinishedUploadsUnderALocation) {
  ExportAwsEnvironment();
  auto left = client_->CreateMultipartUpload(bucket_, "run/step-000004/data-0123456789abcdef-r00001.safetensors");
  ASSERT_TRUE(left.ok()) << left.status();
  ASSERT_TRUE(client_->UploadPart(bucket_, "run/step-000004/data-0123456789abcdef-r00001.safetensors", *left, 1,
                                  Bytes(1000, 1))
                  .ok());
  auto other = client_->CreateMultipartUpload(bucket_, "elsewhere/x");
  ASSERT_TRUE(other.ok()) << other.status();
  const std::string location = absl::StrCat("s3://", bucket_, "/run");

  std::ostringstream out, err;
  EXPECT_EQ(Uploads(location, /*abort=*/false, out, err), 0) << err.str();
  EXPECT_TRUE(absl::StrContains(out.str(), "/run/step-000004/data-0123456789abcdef-r00001.safetensors  upload " + *left))
      << out.str();
  EXPECT_TRUE(absl::StrContains(out.str(), "1 unfinished upload under")) << out.str();
  EXPECT_EQ(client_->ListMultipartUploads(bucket_, "run/")->size(), 1u);

  std::ostringstream out2, err2;
  EXPECT_EQ(Uploads(location, /*abort=*/true, out2, err2), 0) << err2.str();
  EXPECT_TRUE(absl::StrContains(out2.str(), "aborted")) << out2.str();
  EXPECT_TRUE(client_->ListMultipartUploads(bucket_, "run/")->empty());
  EXPECT_EQ(client_->ListMultipartUploads(bucket_, "elsewhere/")->size(), 1u);

  std::ostringstream out3, err3;
  EXPECT_EQ(Uploads("/tmp/local", false, out3, err3), 2);
  EXPECT_TRUE(absl::StrContains(err3.str(), "s3://bucket/prefix")) << err3.str();
}

namespace cp = sharded::checkpoint;

// 12 MiB per rank at W=2: a multipart upload of a 5 MiB part and a 7 MiB one.
std::vector<cp::testing::TensorSpec> Big(int world) {
  return {{"big", {2048, 3072}, c10::ScalarType::Float, sharded::ChunkShardingSpec::OnRanks(0, world)}};
}

// Every rank's status of `body` on `world` ranks.
std::vector<absl::Status> OnEveryRank(int world, const std::function<absl::Status(simulate::RankContext&)>& body) {
  std::vector<absl::Status> out(world);
  simulate::SimulatedCluster cluster(world, cp::testing::Options());
  (void)cluster.Run([&](simulate::RankContext& ctx) -> absl::Status {
    out[ctx.rank] = body(ctx);
    return absl::OkStatus();
  });
  return out;
}

TEST_F(UploadsTest, AServerKilledMidMultipartLeavesTheOldCheckpointAndAnUploadToAbort) {
  ExportAwsEnvironment();
  const std::string location = absl::StrCat("s3://", bucket_, "/mp");
  const std::string dir = location + "/step-1";
  for (const absl::Status& s : OnEveryRank(2, [&](simulate::RankContext& ctx) -> absl::Status {
         SL_ASSIGN_OR_RETURN(sharded::StateDict state, cp::testing::MakeState(Big(2), 1, ctx.pg));
         return cp::SaveCheckpoint(state, dir, *ctx.pg);
       })) {
    ASSERT_TRUE(s.ok()) << s;
  }

  // The server dies when the second part arrives (of either rank).
  cp::s3::testing::S3FrontOptions front_options;
  front_options.kills = {absl::StrCat("^PUT .*partNumber=,2,", server_->pid())};
  auto front = cp::s3::testing::S3Front::Start(server_->endpoint(), front_options);
  ASSERT_TRUE(front.ok()) << front.status();
  cp::s3::S3ClientOptions client_options;
  client_options.deadline = absl::Seconds(5);
  cp::s3::S3StorageOptions options;
  options.part_bytes = int64_t{5} << 20;
  auto storage = std::make_shared<cp::s3::S3Storage>(
      cp::s3::S3Client::Create((*front)->Via(server_->config()), client_options), options);
  const absl::Time t0 = absl::Now();
  const std::vector<absl::Status> saved = OnEveryRank(2, [&](simulate::RankContext& ctx) -> absl::Status {
    SL_ASSIGN_OR_RETURN(sharded::StateDict state, cp::testing::MakeState(Big(2), 2, ctx.pg));
    cp::SaveOptions save_options;
    save_options.storage = storage;
    return cp::SaveCheckpoint(state, dir, *ctx.pg, save_options);
  });
  EXPECT_LT(absl::Now() - t0, absl::Seconds(60));
  for (const absl::Status& s : saved) {
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(absl::StrContains(s.message(), dir)) << s;
  }
  std::fprintf(stderr, "the save killed mid-multipart: %s\n", saved[0].ToString().c_str());

  (void)server_->Crash();  // reaps the KILLed process
  const absl::Status restarted = server_->Restart();
  ASSERT_TRUE(restarted.ok()) << restarted;
  // weed answers before its volume server is back: loads are retried a while.
  absl::Status loaded;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  do {
    std::vector<absl::Status> per_rank = OnEveryRank(3, [&](simulate::RankContext& ctx) -> absl::Status {
      SL_ASSIGN_OR_RETURN(sharded::StateDict state, cp::testing::MakeState(Big(3), -1, ctx.pg));
      SL_RETURN_IF_ERROR(cp::LoadCheckpoint(state, dir, *ctx.pg));
      return cp::testing::CheckState(state, 1);
    });
    loaded = per_rank[0];
    for (const absl::Status& s : per_rank) loaded.Update(s);
  } while (!loaded.ok() && absl::IsUnavailable(loaded) && absl::Now() < deadline);
  EXPECT_TRUE(loaded.ok()) << "the previous checkpoint after the crash: " << loaded;

  std::ostringstream out, err;
  EXPECT_EQ(Uploads(location, /*abort=*/false, out, err), 0) << err.str();
  EXPECT_TRUE(absl::StrContains(out.str(), "/mp/step-1/data-")) << out.str();
  EXPECT_FALSE(client_->ListMultipartUploads(bucket_, "mp/")->empty());
  std::ostringstream out2, err2;
  EXPECT_EQ(Uploads(location, /*abort=*/true, out2, err2), 0) << err2.str();
  EXPECT_TRUE(client_->ListMultipartUploads(bucket_, "mp/")->empty());
}

}  // namespace
}  // namespace shardlight::tools::ckpt
