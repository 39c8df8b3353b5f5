// S3Client against a real S3 server: SeaweedFS started on loopback for this
// test (testing/seaweedfs_test.h), in a private network namespace where the
// machine allows one. Skips, naming why, only when SeaweedFS is not
// installed.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "sharded/checkpoint/storage/s3/digest.h"
#include "sharded/checkpoint/storage/s3/s3_client.h"
#include "sharded/checkpoint/storage/s3/testing/seaweedfs_test.h"

namespace shardlight::sharded::checkpoint::s3 {
namespace {

using testing::SeaweedFsTest;

using S3ClientServerTest = SeaweedFsTest;

TEST_F(S3ClientServerTest, PutGetHeadDelete) {
  const std::string body = "a small object";
  auto etag = client_->PutObject(bucket_, "dir/one", body);
  ASSERT_TRUE(etag.ok()) << etag.status();
  EXPECT_EQ(*etag, Md5Hex(body));
  auto got = client_->GetObject(bucket_, "dir/one");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, body);
  auto head = client_->HeadObject(bucket_, "dir/one");
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->size, static_cast<int64_t>(body.size()));
  EXPECT_EQ(head->etag, Md5Hex(body));

  ASSERT_TRUE(client_->DeleteObject(bucket_, "dir/one").ok());
  EXPECT_TRUE(client_->DeleteObject(bucket_, "dir/one").ok()) << "deleting a missing key is fine";
  EXPECT_EQ(client_->HeadObject(bucket_, "dir/one").status().code(), absl::StatusCode::kNotFound);
  const absl::Status missing = client_->GetObject(bucket_, "dir/one").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.message().find(S3Url(bucket_, "dir/one")), std::string::npos) << missing;
  EXPECT_NE(missing.message().find("NoSuchKey"), std::string::npos) << missing;
}

// Keys are encoded once in the path; the same bytes come back in listings.
TEST_F(S3ClientServerTest, KeysWithReservedCharacters) {
  const std::string key = "step 1/a+b=c&d~e(f)$g,h;i%20<j>\x01\xc3\xa9.bin";
  ASSERT_TRUE(client_->PutObject(bucket_, key, "x").ok());
  auto got = client_->GetObject(bucket_, key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "x");
  auto list = client_->ListObjects(bucket_, "step 1/");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->objects.size(), 1u);
  EXPECT_EQ(list->objects[0].key, key);
}

TEST_F(S3ClientServerTest, RangedGetsAreExact) {
  const std::string body = Bytes(100000, 1);
  ASSERT_TRUE(client_->PutObject(bucket_, "r", body).ok());
  std::string buffer(1000, '\0');
  // An offset past 0 succeeds only as a 206 (GetObjectRange refuses a 200).
  auto n = client_->GetObjectRange(bucket_, "r", 12345, 1000, buffer.data());
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 1000);
  EXPECT_EQ(buffer, body.substr(12345, 1000));
  // A range running past the end returns what is there.
  n = client_->GetObjectRange(bucket_, "r", 99500, 1000, buffer.data());
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 500);
  EXPECT_EQ(buffer.substr(0, 500), body.substr(99500));
  // One starting at the end is OutOfRange.
  EXPECT_EQ(client_->GetObjectRange(bucket_, "r", 100000, 10, buffer.data()).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST_F(S3ClientServerTest, ListingFollowsContinuationTokens) {
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(client_->PutObject(bucket_, absl::StrCat("p/", i), "v").ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(client_->PutObject(bucket_, absl::StrCat("q/", i), "v").ok());
  auto list = client_->ListObjects(bucket_, "p/", "", /*page_size=*/3);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->objects.size(), 7u);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(list->objects[i].key, absl::StrCat("p/", i));
    EXPECT_EQ(list->objects[i].size, 1);
  }
  auto folders = client_->ListObjects(bucket_, "", "/", /*page_size=*/1);
  ASSERT_TRUE(folders.ok()) << folders.status();
  EXPECT_TRUE(folders->objects.empty());
  EXPECT_EQ(folders->common_prefixes, (std::vector<std::string>{"p/", "q/"}));
}

TEST_F(S3ClientServerTest, MultipartUpload) {
  const std::string part1 = Bytes(5 << 20, 2), part2 = Bytes(1 << 20, 3);
  auto id = client_->CreateMultipartUpload(bucket_, "big");
  ASSERT_TRUE(id.ok()) << id.status();
  auto listed = client_->ListMultipartUploads(bucket_, "");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].key, "big");
  EXPECT_EQ((*listed)[0].upload_id, *id);

  std::vector<CompletedPart> parts;
  // Parts may arrive in any order.
  auto e2 = client_->UploadPart(bucket_, "big", *id, 2, part2);
  auto e1 = client_->UploadPart(bucket_, "big", *id, 1, part1);
  ASSERT_TRUE(e1.ok() && e2.ok()) << e1.status() << e2.status();
  parts = {{1, *e1}, {2, *e2}};
  auto etag = client_->CompleteMultipartUpload(bucket_, "big", *id, parts);
  ASSERT_TRUE(etag.ok()) << etag.status();
  auto got = client_->GetObject(bucket_, "big");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == part1 + part2);
  auto head = client_->HeadObject(bucket_, "big");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->size, (6 << 20));
  listed = client_->ListMultipartUploads(bucket_, "");
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
}

TEST_F(S3ClientServerTest, MultipartAbortAndTooSmallParts) {
  auto id = client_->CreateMultipartUpload(bucket_, "small");
  ASSERT_TRUE(id.ok()) << id.status();
  auto e1 = client_->UploadPart(bucket_, "small", *id, 1, Bytes(1000, 4));
  auto e2 = client_->UploadPart(bucket_, "small", *id, 2, Bytes(1000, 5));
  ASSERT_TRUE(e1.ok() && e2.ok());
  // Every part but the last must be at least 5 MiB.
  const absl::Status small = client_->CompleteMultipartUpload(bucket_, "small", *id, {{1, *e1}, {2, *e2}}).status();
  EXPECT_EQ(small.code(), absl::StatusCode::kInvalidArgument) << small;
  EXPECT_NE(small.message().find("EntityTooSmall"), std::string::npos) << small;

  ASSERT_TRUE(client_->AbortMultipartUpload(bucket_, "small", *id).ok());
  auto listed = client_->ListMultipartUploads(bucket_, "");
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
  EXPECT_EQ(client_->HeadObject(bucket_, "small").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(S3ClientServerTest, IfNoneMatchRefusesAnExistingKey) {
  ASSERT_TRUE(client_->PutObject(bucket_, "index", "first", /*if_none_match=*/true).ok());
  const absl::Status second = client_->PutObject(bucket_, "index", "second", /*if_none_match=*/true).status();
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition) << second;
  EXPECT_NE(second.message().find("PreconditionFailed"), std::string::npos) << second;
  EXPECT_NE(second.message().find(S3Url(bucket_, "index")), std::string::npos) << second;
  EXPECT_EQ(*client_->GetObject(bucket_, "index"), "first");

  // CompleteMultipartUpload too: the upload stays open for an abort.
  auto id = client_->CreateMultipartUpload(bucket_, "index");
  ASSERT_TRUE(id.ok());
  auto e1 = client_->UploadPart(bucket_, "index", *id, 1, "late");
  ASSERT_TRUE(e1.ok());
  const absl::Status complete =
      client_->CompleteMultipartUpload(bucket_, "index", *id, {{1, *e1}}, /*if_none_match=*/true).status();
  EXPECT_EQ(complete.code(), absl::StatusCode::kFailedPrecondition) << complete;
  EXPECT_EQ(*client_->GetObject(bucket_, "index"), "first");
  EXPECT_TRUE(client_->AbortMultipartUpload(bucket_, "index", *id).ok());

  // Without the condition, a PUT overwrites.
  ASSERT_TRUE(client_->PutObject(bucket_, "index", "third").ok());
  EXPECT_EQ(*client_->GetObject(bucket_, "index"), "third");
}

TEST_F(S3ClientServerTest, ExactlyOneOfRacingWritersWins) {
  constexpr int kWriters = 16;
  std::vector<absl::Status> results(kWriters);
  // All start together (a spin-wait would starve the thread creating them).
  std::promise<void> go_promise;
  std::shared_future<void> go = go_promise.get_future().share();
  std::vector<std::thread> threads;
  for (int i = 0; i < kWriters; ++i) {
    threads.emplace_back([&, i] {
      go.wait();
      results[i] = client_->PutObject(bucket_, "commit", absl::StrCat("writer ", i), /*if_none_match=*/true).status();
    });
  }
  go_promise.set_value();
  for (auto& t : threads) t.join();
  int winner = -1, refused = 0;
  for (int i = 0; i < kWriters; ++i) {
    if (results[i].ok()) {
      EXPECT_EQ(winner, -1) << "two winners: " << winner << " and " << i;
      winner = i;
    } else {
      EXPECT_EQ(results[i].code(), absl::StatusCode::kFailedPrecondition) << results[i];
      ++refused;
    }
  }
  ASSERT_NE(winner, -1);
  EXPECT_EQ(refused, kWriters - 1);
  EXPECT_EQ(*client_->GetObject(bucket_, "commit"), absl::StrCat("writer ", winner));
}

TEST_F(S3ClientServerTest, WrongCredentialsAreAClearError) {
  S3Config bad_secret = server_->config();
  bad_secret.credentials.secret_access_key = "not-the-secret";
  const absl::Status s = S3Client::Create(bad_secret)->PutObject(bucket_, "k", "v").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("SignatureDoesNotMatch"), std::string::npos) << s;
  EXPECT_NE(s.message().find(S3Url(bucket_, "k")), std::string::npos) << s;

  S3Config bad_key = server_->config();
  bad_key.credentials.access_key_id = "nobody";
  const absl::Status k = S3Client::Create(bad_key)->GetObject(bucket_, "k").status();
  EXPECT_EQ(k.code(), absl::StatusCode::kPermissionDenied) << k;
  EXPECT_NE(k.message().find("AWS_ACCESS_KEY_ID"), std::string::npos) << k;
}

TEST_F(S3ClientServerTest, ASkewedClockIsNamed) {
  S3ClientOptions options;
  options.clock_offset = absl::Hours(1);
  const absl::Status s = S3Client::Create(server_->config(), options)->GetObject(bucket_, "k").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("RequestTimeTooSkewed"), std::string::npos) << s;
  EXPECT_NE(s.message().find("clock"), std::string::npos) << s;
  EXPECT_NE(s.message().find(S3Url(bucket_, "k")), std::string::npos) << s;
}

// An object's bytes are data, whatever they say.
TEST_F(S3ClientServerTest, AnObjectThatLooksLikeAnErrorIsData) {
  const std::string body = "<Error><Code>InternalError</Code></Error>";
  ASSERT_TRUE(client_->PutObject(bucket_, "e.xml", body).ok());
  auto got = client_->GetObject(bucket_, "e.xml");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, body);
}

TEST_F(S3ClientServerTest, MissingBucketIsNamed) {
  const absl::Status s = client_->PutObject("no-such-bucket-here", "ckpt/index.json", "v").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("s3://no-such-bucket-here/ckpt/index.json"), std::string::npos) << s;
  EXPECT_NE(s.message().find("NoSuchBucket"), std::string::npos) << s;
  const absl::Status g = client_->GetObject("no-such-bucket-there", "ckpt/index.json").status();
  EXPECT_EQ(g.code(), absl::StatusCode::kNotFound) << g;
  EXPECT_NE(g.message().find("s3://no-such-bucket-there/ckpt/index.json"), std::string::npos) << g;
  EXPECT_NE(g.message().find("NoSuchBucket"), std::string::npos) << g;
  const absl::Status l = client_->ListObjects("no-such-bucket-there", "").status();
  EXPECT_EQ(l.code(), absl::StatusCode::kNotFound) << l;
  EXPECT_NE(l.message().find("no-such-bucket-there"), std::string::npos) << l;
}

// SIGSTOPs the server and waits until it is stopped (kill returns before
// every thread of it is).
void PauseServer(pid_t pid) {
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  for (int i = 0; i < 200; ++i) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t paren = line.rfind(')');
    if (paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'T') return;
    absl::SleepFor(absl::Milliseconds(10));
  }
  FAIL() << "the server (pid " << pid << ") did not stop";
}

// A server that stops answering (SIGSTOP: the kernel still accepts the
// connection, nothing replies) stalls the transfer; the stalled attempt is
// dropped and retried, and succeeds once the server is back.
TEST_F(S3ClientServerTest, RetriesOutlastAStalledServer) {
  ASSERT_TRUE(client_->PutObject(bucket_, "k", "still here").ok());
  S3ClientOptions options;
  options.stall_timeout = absl::Seconds(1);
  options.connect_timeout = absl::Seconds(1);
  options.deadline = absl::Seconds(30);
  options.max_attempts = 20;
  auto patient = S3Client::Create(server_->config(), options);
  PauseServer(server_->pid());
  std::thread resume([pid = server_->pid()] {
    absl::SleepFor(absl::Milliseconds(2500));
    kill(pid, SIGCONT);
  });
  const absl::Time t0 = absl::Now();
  auto got = patient->GetObject(bucket_, "k");
  const absl::Duration took = absl::Now() - t0;
  resume.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "still here");
  EXPECT_GT(took, absl::Seconds(2)) << "it did wait for the server";
}

// Stalled past the deadline: a clear error, in bounded time.
TEST_F(S3ClientServerTest, AStalledServerFailsWithinTheDeadline) {
  S3ClientOptions options;
  options.stall_timeout = absl::Seconds(1);
  options.deadline = absl::Seconds(3);
  auto impatient = S3Client::Create(server_->config(), options);
  PauseServer(server_->pid());
  const absl::Time t0 = absl::Now();
  const absl::Status s = impatient->GetObject(bucket_, "k").status();
  const absl::Duration took = absl::Now() - t0;
  kill(server_->pid(), SIGCONT);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find(S3Url(bucket_, "k")), std::string::npos) << s;
  EXPECT_LT(took, absl::Seconds(6)) << s;
}

// A front on 127.0.0.1 for the real server: its first `refusals`
// connections get `reply` (an S3 error) and are closed; the rest are
// relayed byte for byte, so signatures (over the front's Host) still verify.
class FaultyFront {
 public:
  FaultyFront(int target_port, int refusals, std::string reply)
      : target_port_(target_port), refusals_(refusals), reply_(std::move(reply)) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(listener_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(listener_, 16) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
    accepter_ = std::thread([this] { Accept(); });
  }
  ~FaultyFront() {
    shutdown(listener_, SHUT_RDWR);
    close(listener_);
    accepter_.join();
    for (auto& t : relays_) t.join();
  }
  int port() const { return port_; }
  int refused() const { return refused_; }

 private:
  void Accept() {
    while (true) {
      const int client = accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      if (refused_ < refusals_) {
        ++refused_;
        char buffer[65536];
        (void)!recv(client, buffer, sizeof(buffer), 0);  // the request's head (and perhaps body)
        (void)!send(client, reply_.data(), reply_.size(), MSG_NOSIGNAL);
        close(client);
        continue;
      }
      const int server = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      to.sin_port = htons(static_cast<uint16_t>(target_port_));
      if (connect(server, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
        close(client);
        close(server);
        continue;
      }
      relays_.emplace_back([client, server] { Pump(client, server); });
      relays_.emplace_back([client, server] { Pump(server, client); });
    }
  }
  static void Pump(int from, int to) {
    char buffer[65536];
    ssize_t n;
    while ((n = recv(from, buffer, sizeof(buffer), 0)) > 0) {
      if (send(to, buffer, static_cast<size_t>(n), MSG_NOSIGNAL) != n) break;
    }
    shutdown(to, SHUT_WR);
  }

  const int target_port_;
  const int refusals_;
  const std::string reply_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<int> refused_{0};
  std::thread accepter_;
  std::vector<std::thread> relays_;
};

int PortOf(const std::string& endpoint) { return std::stoi(endpoint.substr(endpoint.rfind(':') + 1)); }

std::string S3ErrorReply(int status, const std::string& reason, const std::string& code) {
  const std::string body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>" + code + "</Code><Message>" + reason +
                           "</Message></Error>";
  return absl::StrCat("HTTP/1.1 ", status, " ", reason, "\r\nContent-Type: application/xml\r\nContent-Length: ",
                      body.size(), "\r\nConnection: close\r\n\r\n", body);
}

// 503 SlowDown, 500 InternalError and a connection closed without a word
// are each retried, and the operation then succeeds against the real server.
TEST_F(S3ClientServerTest, TransientErrorsAreRetried) {
  ASSERT_TRUE(client_->PutObject(bucket_, "k", "value").ok());
  for (const std::string& reply : {S3ErrorReply(503, "Slow Down", "SlowDown"),
                                   S3ErrorReply(500, "We encountered an internal error", "InternalError"),
                                   std::string()}) {
    FaultyFront front(PortOf(server_->endpoint()), 2, reply);
    ASSERT_NE(front.port(), 0);
    S3Config via_front = server_->config();
    via_front.endpoint_url = absl::StrCat("http://127.0.0.1:", front.port());
    auto got = S3Client::Create(via_front)->GetObject(bucket_, "k");
    ASSERT_TRUE(got.ok()) << got.status() << " (reply: " << reply.substr(0, 30) << ")";
    EXPECT_EQ(*got, "value");
    EXPECT_EQ(front.refused(), 2);
  }
}

// Errors that a retry cannot fix are not retried.
TEST_F(S3ClientServerTest, PermanentErrorsAreNotRetried) {
  FaultyFront front(PortOf(server_->endpoint()), 1, S3ErrorReply(403, "Access Denied", "AccessDenied"));
  S3Config via_front = server_->config();
  via_front.endpoint_url = absl::StrCat("http://127.0.0.1:", front.port());
  const absl::Status s = S3Client::Create(via_front)->GetObject(bucket_, "k").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("AccessDenied"), std::string::npos) << s;
  EXPECT_EQ(front.refused(), 1);
}

// A server that is not there: retries, then a clear error within the deadline.
TEST_F(S3ClientServerTest, UnreachableServerFailsWithinTheDeadline) {
  S3Config gone = server_->config();
  gone.endpoint_url = "http://127.0.0.1:1";  // nothing listens on port 1
  S3ClientOptions options;
  options.deadline = absl::Seconds(2);
  const absl::Time t0 = absl::Now();
  const absl::Status s = S3Client::Create(gone, options)->GetObject(bucket_, "k").status();
  const absl::Duration took = absl::Now() - t0;
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("gave up after"), std::string::npos) << s;
  EXPECT_LT(took, absl::Seconds(4)) << s;
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint::s3
