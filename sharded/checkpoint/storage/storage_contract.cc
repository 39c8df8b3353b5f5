#include "sharded/checkpoint/storage/storage_contract.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace shardlight::sharded::checkpoint {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

void ExpectDirectoryContract(Storage& s, const std::string& root) {
  ASSERT_TRUE(s.MakeDirectories(root + "/sub").ok());
  EXPECT_TRUE(s.List(root + "/sub")->empty()) << "an empty directory exists and lists";
  auto f = File::CreateNew(s, root + "/sub/x");
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(f->Close().ok());
  EXPECT_THAT(*s.List(root), ElementsAre("sub"));
  const absl::Status full = s.Remove(root + "/sub");
  EXPECT_FALSE(full.ok()) << "a directory with a file is not removed";
  EXPECT_THAT(std::string(full.message()), HasSubstr(root + "/sub"));
  EXPECT_TRUE(s.Exists(root + "/sub/x"));
  ASSERT_TRUE(s.Remove(root + "/sub/x").ok());
  ASSERT_TRUE(s.Remove(root + "/sub").ok());
  EXPECT_FALSE(s.Exists(root + "/sub"));
  EXPECT_TRUE(s.List(root)->empty());
}

}  // namespace shardlight::sharded::checkpoint
