#include "sharded/checkpoint/storage/s3/testing/seaweedfs_test.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "absl/time/clock.h"

namespace shardlight::sharded::checkpoint::s3::testing {

SeaweedFsServer* SeaweedFsTest::server_ = nullptr;

void SeaweedFsTest::SetUpTestSuite() {
  if (!SeaweedFsServer::WhyUnavailable().empty()) return;
  const absl::Time t0 = absl::Now();
  SeaweedFsOptions options;
  // A test throws the data away: no reason to wait 30 s for a graceful stop.
  options.stop_timeout = absl::Seconds(5);
  auto server = SeaweedFsServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = std::move(server).value().release();
  std::fprintf(stderr, "SeaweedFS ready at %s in %s\n", server_->endpoint().c_str(),
               absl::FormatDuration(absl::Now() - t0).c_str());
}

void SeaweedFsTest::TearDownTestSuite() {
  if (server_ == nullptr) return;
  const absl::Time t0 = absl::Now();
  const absl::Status stopped = server_->Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
  std::fprintf(stderr, "SeaweedFS stopped in %s\n", absl::FormatDuration(absl::Now() - t0).c_str());
  delete server_;
  server_ = nullptr;
}

void SeaweedFsTest::SetUp() {
  if (std::string why = SeaweedFsServer::WhyUnavailable(); !why.empty()) {
    // CI (.ci/run) sets SHARDLIGHT_REQUIRE_S3_SERVER=1: there a missing
    // server fails the test instead of skipping it.
    const char* required = std::getenv("SHARDLIGHT_REQUIRE_S3_SERVER");
    if (required != nullptr && std::string(required) == "1") {
      FAIL() << why << " (and SHARDLIGHT_REQUIRE_S3_SERVER=1: the S3 tests must run here)";
    }
    GTEST_SKIP() << why;
  }
  ASSERT_NE(server_, nullptr) << "the server did not start (see the suite's first failure)";
  client_ = S3Client::Create(server_->config());
  // Bucket names: lower case, 3-63 characters.
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  // letters, digits and '-' (a parameterized test's name has a '/').
  for (char& c : name) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '-';
  }
  bucket_ = ("t-" + name).substr(0, 63);
  const absl::Status created = client_->CreateBucket(bucket_);
  ASSERT_TRUE(created.ok()) << created;
}

void SeaweedFsTest::ExportAwsEnvironment() {
  const S3Config config = server_->config();
  setenv("AWS_ACCESS_KEY_ID", config.credentials.access_key_id.c_str(), 1);
  setenv("AWS_SECRET_ACCESS_KEY", config.credentials.secret_access_key.c_str(), 1);
  unsetenv("AWS_SESSION_TOKEN");
  setenv("AWS_REGION", config.region.c_str(), 1);
  setenv("AWS_ENDPOINT_URL", config.endpoint_url.c_str(), 1);
  unsetenv("AWS_ENDPOINT_URL_S3");
}

std::string SeaweedFsTest::Bytes(size_t n, int seed) {
  std::string s(n, '\0');
  uint32_t x = 2463534242u + static_cast<uint32_t>(seed);
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    s[i] = static_cast<char>(x);
  }
  return s;
}

}  // namespace shardlight::sharded::checkpoint::s3::testing
