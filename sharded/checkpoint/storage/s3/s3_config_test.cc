// S3ConfigFromEnvironment and the endpoint a request goes to; the XML and
// URL decoding of S3's replies. No server.
#include "sharded/checkpoint/storage/s3/s3_config.h"

#include <cstdlib>

#include "gtest/gtest.h"
#include "sharded/checkpoint/storage/s3/s3_xml.h"

namespace shardlight::sharded::checkpoint::s3 {
namespace {

void ClearAws() {
  for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
                        "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"}) {
    unsetenv(v);
  }
}

TEST(S3ConfigTest, FromTheAwsVariables) {
  ClearAws();
  setenv("AWS_ACCESS_KEY_ID", "id", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "secret", 1);
  setenv("AWS_SESSION_TOKEN", "token", 1);
  setenv("AWS_DEFAULT_REGION", "eu-west-1", 1);
  setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/", 1);
  auto c = S3ConfigFromEnvironment();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->credentials.access_key_id, "id");
  EXPECT_EQ(c->credentials.secret_access_key, "secret");
  EXPECT_EQ(c->credentials.session_token, "token");
  EXPECT_EQ(c->region, "eu-west-1");
  auto e = EndpointForBucket(*c, "ckpts");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->origin, "http://127.0.0.1:9000");
  EXPECT_EQ(e->host, "127.0.0.1:9000");
  EXPECT_EQ(e->path_prefix, "/ckpts");

  // AWS_REGION over AWS_DEFAULT_REGION; AWS_ENDPOINT_URL_S3 over AWS_ENDPOINT_URL.
  setenv("AWS_REGION", "us-west-2", 1);
  setenv("AWS_ENDPOINT_URL_S3", "https://s3.example.com", 1);
  c = S3ConfigFromEnvironment();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->region, "us-west-2");
  EXPECT_EQ(EndpointForBucket(*c, "b")->origin, "https://s3.example.com");
}

TEST(S3ConfigTest, AwsItselfIsVirtualHosted) {
  S3Config c;
  c.region = "eu-central-1";
  auto e = EndpointForBucket(c, "ckpts");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->origin, "https://ckpts.s3.eu-central-1.amazonaws.com");
  EXPECT_EQ(e->path_prefix, "");
  EXPECT_EQ(EndpointForService(c)->host, "s3.eu-central-1.amazonaws.com");
}

TEST(S3ConfigTest, MissingKeysAndBadEndpointsAreNamed) {
  ClearAws();
  setenv("AWS_ACCESS_KEY_ID", "id", 1);
  auto c = S3ConfigFromEnvironment();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("AWS_SECRET_ACCESS_KEY"), std::string::npos) << c.status();
  setenv("AWS_SECRET_ACCESS_KEY", "secret", 1);
  for (const char* bad : {"127.0.0.1:9000", "ftp://host", "http://host/path", "http://"}) {
    setenv("AWS_ENDPOINT_URL", bad, 1);
    c = S3ConfigFromEnvironment();
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(c.status().message().find(bad), std::string::npos) << c.status();
  }
  ClearAws();
}

TEST(S3XmlTest, BlocksAndText) {
  const char* xml =
      "<ListBucketResult xmlns=\"x\"><IsTruncated>true</IsTruncated><Contents><Key>a&amp;b</Key>"
      "<KeyMarker/><Size>3</Size></Contents><Contents><Key>c%2Bd+e</Key></Contents></ListBucketResult>";
  auto blocks = XmlBlocks(xml, "Contents");
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(XmlText(blocks[0], "Key"), "a&b");  // not <KeyMarker/>
  EXPECT_EQ(XmlText(blocks[0], "Size"), "3");
  EXPECT_EQ(UrlDecode(*XmlText(blocks[1], "Key")), "c+d e");
  EXPECT_EQ(XmlText(xml, "IsTruncated"), "true");
  EXPECT_EQ(XmlText(xml, "Missing"), std::nullopt);
  EXPECT_EQ(XmlText("<Error><Code>NoSuchKey</Code><Message>it &lt;is&gt; gone</Message></Error>", "Message"),
            "it <is> gone");
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint::s3
