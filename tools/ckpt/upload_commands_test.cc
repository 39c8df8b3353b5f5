// ckpt uploads against a real S3 server (SeaweedFS on loopback): a
// multipart upload left unfinished (as by a save that crashed) is listed
// with its key; --abort aborts it and the bucket has none left; an upload
// under another prefix is not touched; a local path is refused.
#include "tools/ckpt/upload_commands.h"

#include <gtest/gtest.h>

#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/storage/s3/testing/seaweedfs_test.h"

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

}  // namespace
}  // namespace shardlight::tools::ckpt
