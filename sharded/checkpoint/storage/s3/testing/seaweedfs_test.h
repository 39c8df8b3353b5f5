// A gtest fixture over SeaweedFsServer: one server for the whole suite
// (started in SetUpTestSuite, stopped in TearDownTestSuite, both timed on
// stderr), a client and a fresh bucket named after each test. Every test
// skips, naming why, when SeaweedFS is not installed -- or fails, when
// SHARDLIGHT_REQUIRE_S3_SERVER=1 (CI sets it).
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_TESTING_SEAWEEDFS_TEST_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_TESTING_SEAWEEDFS_TEST_H_

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "sharded/checkpoint/storage/s3/s3_client.h"
#include "sharded/checkpoint/storage/s3/testing/seaweedfs_server.h"

namespace shardlight::sharded::checkpoint::s3::testing {

class SeaweedFsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();
  void SetUp() override;

  // Sets AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION and
  // AWS_ENDPOINT_URL for this server (and unsets AWS_SESSION_TOKEN), so that
  // s3:// locations given without a Storage reach it (default_storage.h).
  static void ExportAwsEnvironment();

  // Deterministic bytes that differ by seed.
  static std::string Bytes(size_t n, int seed);

  static SeaweedFsServer* server_;
  std::shared_ptr<S3Client> client_;
  std::string bucket_;  // "t-<test name in lower case>", created empty
};

}  // namespace shardlight::sharded::checkpoint::s3::testing

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_TESTING_SEAWEEDFS_TEST_H_
