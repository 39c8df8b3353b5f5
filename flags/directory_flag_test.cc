// PrepareWritableDirectory on the paths a user gets wrong.
#include "flags/directory_flag.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

namespace shardlight::tools::flags {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string Tmp(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

TEST(DirectoryFlagTest, CreatesAMissingDirectoryAndLeavesNoProbe) {
  const std::string dir = Tmp("new/nested/ckpt");
  EXPECT_EQ(PrepareWritableDirectory("checkpoint_dir", dir), "");
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_TRUE(fs::is_empty(dir));
  EXPECT_EQ(PrepareWritableDirectory("checkpoint_dir", dir), "") << "an existing directory is fine";
}

TEST(DirectoryFlagTest, FilesWhereTheDirectoryShouldBeAreNamed) {
  const std::string file = Tmp("a_file");
  std::ofstream(file) << "x";
  EXPECT_EQ(PrepareWritableDirectory("checkpoint_dir", file),
            "--checkpoint_dir='" + file + "' is a file, not a directory");
  EXPECT_EQ(PrepareWritableDirectory("checkpoint_dir", file + "/sub/dir"),
            "--checkpoint_dir='" + file + "/sub/dir' cannot be a directory: '" + file + "' is a file");
  EXPECT_EQ(PrepareWritableDirectory("out", ""), "--out='': empty path");
}

TEST(DirectoryFlagTest, UnwritablePlacesAreRefused) {
  // Refused even for root: /proc takes no new directories, /sys no files.
  EXPECT_THAT(PrepareWritableDirectory("checkpoint_dir", "/proc/shardlight_ckpt"),
              HasSubstr("--checkpoint_dir='/proc/shardlight_ckpt' cannot be created: "));
  EXPECT_THAT(PrepareWritableDirectory("checkpoint_dir", "/sys/kernel"),
              HasSubstr("--checkpoint_dir='/sys/kernel' is not writable: "));
  if (::getuid() != 0) {
    const std::string locked = Tmp("locked");
    fs::create_directories(locked);
    fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_THAT(PrepareWritableDirectory("checkpoint_dir", locked), HasSubstr("is not writable: Permission denied"));
    fs::permissions(locked, fs::perms::owner_all);
  }
}

}  // namespace
}  // namespace shardlight::tools::flags
