// S3Storage keeps the storage seam's contract (storage.h) on a real S3
// server (SeaweedFS on loopback): exclusive create, OutOfRange at the end,
// atomic replacement by Rename, listing and removing directories; large
// files go up in parts and appear only when closed.
#include "sharded/checkpoint/storage/s3/s3_storage.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sharded/checkpoint/storage/s3/testing/seaweedfs_test.h"
#include "sharded/checkpoint/storage/storage_contract.h"

namespace shardlight::sharded::checkpoint::s3 {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class S3StorageServerTest : public testing::SeaweedFsTest {
 protected:
  void SetUp() override {
    SeaweedFsTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    S3StorageOptions options;
    options.part_bytes = 5 << 20;  // S3's smallest part
    storage_ = std::make_unique<S3Storage>(client_, options);
    root_ = absl::StrCat("s3://", bucket_, "/ckpt");
  }

  std::vector<std::string> Sorted(std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  }

  std::unique_ptr<S3Storage> storage_;
  std::string root_;
};

TEST(S3PathTest, Parses) {
  auto p = ParseS3Path("s3://bucket/a/b/");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->bucket, "bucket");
  EXPECT_EQ(p->key, "a/b");
  EXPECT_EQ(ParseS3Path("s3://bucket")->key, "");
  EXPECT_TRUE(IsS3Path("s3://b/k"));
  EXPECT_FALSE(IsS3Path("/tmp/s3://b"));
  for (const char* bad : {"/tmp/x", "s3://", "s3:///key", "s3://b//k"}) {
    EXPECT_EQ(ParseS3Path(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST_F(S3StorageServerTest, KeepsTheSeamsFileContract) {
  Storage& s = *storage_;
  ASSERT_TRUE(s.MakeDirectories(root_ + "/d/e").ok());
  EXPECT_TRUE(s.Exists(root_ + "/d"));
  auto f = File::CreateNew(s, root_ + "/d/a");
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE(f->WriteAt("hello", 5, 0).ok());
  ASSERT_TRUE(f->WriteAt("!", 1, 7).ok());
  EXPECT_EQ(*f->Size(), 8);
  EXPECT_FALSE(s.Exists(root_ + "/d/a")) << "invisible until closed";
  ASSERT_TRUE(f->Close().ok());
  EXPECT_TRUE(absl::IsAlreadyExists(s.CreateNew(root_ + "/d/a").status()));
  auto text = ReadWholeFile(s, root_ + "/d/a", 100);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, std::string("hello\0\0!", 8));
  auto r = File::OpenForRead(s, root_ + "/d/a");
  ASSERT_TRUE(r.ok());
  char buffer[4];
  const absl::Status past = r->ReadAt(buffer, 4, 6);
  EXPECT_TRUE(absl::IsOutOfRange(past)) << past;
  EXPECT_THAT(std::string(past.message()), HasSubstr("ends at byte 8"));
  ASSERT_TRUE(r->ReadAt(buffer, 3, 1).ok());
  EXPECT_EQ(std::string(buffer, 3), "ell");

  ASSERT_TRUE(s.Rename(root_ + "/d/a", root_ + "/d/b").ok());
  EXPECT_FALSE(s.Exists(root_ + "/d/a"));
  EXPECT_THAT(Sorted(*s.List(root_ + "/d")), ElementsAre("b", "e")) << "files and subdirectories";
  EXPECT_TRUE(absl::IsNotFound(s.Rename(root_ + "/d/a", root_ + "/d/c")));
  ASSERT_TRUE(s.Remove(root_ + "/d/b").ok());
  EXPECT_TRUE(s.Remove(root_ + "/d/b").ok()) << "a missing file is fine";
  EXPECT_THAT(*s.List(root_ + "/d"), ElementsAre("e"));
  EXPECT_TRUE(absl::IsNotFound(s.List(root_ + "/nope").status()));
  EXPECT_TRUE(absl::IsNotFound(File::OpenForRead(s, root_ + "/nope").status()));
}

// Rename replaces: what a commit of index.json and a root's `latest` rely on.
TEST_F(S3StorageServerTest, RenameReplacesTheTarget) {
  for (const char* name : {"old", "new"}) {
    auto f = File::CreateNew(*storage_, root_ + "/" + name);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->WriteAt(name, 3, 0).ok());
    ASSERT_TRUE(f->Close().ok());
  }
  ASSERT_TRUE(storage_->Rename(root_ + "/new", root_ + "/old").ok());
  EXPECT_EQ(*ReadWholeFile(*storage_, root_ + "/old", 10), "new");
  EXPECT_THAT(*storage_->List(root_), ElementsAre("old"));
}

TEST_F(S3StorageServerTest, ListsAndRemovesDirectoriesLikePosix) {
  ASSERT_TRUE(storage_->MakeDirectories(root_).ok());
  ExpectDirectoryContract(*storage_, root_);
}

// 12 MiB in 5 MiB parts: a multipart upload, nothing visible until Close,
// and reads of any range afterwards.
TEST_F(S3StorageServerTest, LargeFilesGoUpInParts) {
  const std::string body = Bytes(12 << 20, 7);
  auto f = File::CreateNew(*storage_, root_ + "/big");
  ASSERT_TRUE(f.ok());
  for (size_t pos = 0; pos < body.size(); pos += 1 << 20) {
    ASSERT_TRUE(f->WriteAt(body.data() + pos, 1 << 20, static_cast<int64_t>(pos)).ok());
  }
  auto uploads = client_->ListMultipartUploads(bucket_, "");
  ASSERT_TRUE(uploads.ok());
  EXPECT_EQ(uploads->size(), 1u) << "parts are going up while the file is written";
  EXPECT_FALSE(storage_->Exists(root_ + "/big"));
  const absl::Status behind = f->WriteAt("x", 1, 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(behind)) << behind;
  ASSERT_TRUE(f->Sync().ok());
  ASSERT_TRUE(f->Close().ok());
  EXPECT_TRUE(client_->ListMultipartUploads(bucket_, "")->empty());
  auto r = File::OpenForRead(*storage_, root_ + "/big");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r->Size(), static_cast<int64_t>(body.size()));
  std::string range(3 << 20, '\0');
  ASSERT_TRUE(r->ReadAt(range.data(), static_cast<int64_t>(range.size()), (4 << 20) + 17).ok());
  EXPECT_TRUE(range == body.substr((4 << 20) + 17, range.size()));
}

// Exclusive create holds against writers that all passed CreateNew's check:
// the server's If-None-Match lets exactly one Close succeed.
TEST_F(S3StorageServerTest, ExactlyOneOfRacingCreatorsWins) {
  constexpr int kWriters = 8;
  std::vector<absl::StatusOr<File>> files;
  for (int i = 0; i < kWriters; ++i) {
    files.push_back(File::CreateNew(*storage_, root_ + "/index.json"));
    ASSERT_TRUE(files.back().ok()) << files.back().status();
    const std::string text = absl::StrCat("writer ", i);
    ASSERT_TRUE(files.back()->WriteAt(text.data(), static_cast<int64_t>(text.size()), 0).ok());
  }
  std::vector<absl::Status> closed(kWriters);
  std::vector<std::thread> threads;
  for (int i = 0; i < kWriters; ++i) threads.emplace_back([&, i] { closed[i] = files[i]->Close(); });
  for (auto& t : threads) t.join();
  int winners = 0;
  std::string winner;
  for (int i = 0; i < kWriters; ++i) {
    if (closed[i].ok()) {
      ++winners;
      winner = absl::StrCat("writer ", i);
    } else {
      EXPECT_TRUE(absl::IsAlreadyExists(closed[i])) << closed[i];
    }
  }
  EXPECT_EQ(winners, 1);
  EXPECT_EQ(*ReadWholeFile(*storage_, root_ + "/index.json", 100), winner);
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint::s3
