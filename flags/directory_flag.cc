#include "flags/directory_flag.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace shardlight::tools::flags {
namespace {

namespace fs = std::filesystem;

// The first existing prefix of `path` (itself included) that is not a
// directory, or "" when there is none.
std::string FirstNonDirectory(const fs::path& path) {
  fs::path prefix;
  for (const fs::path& part : path) {
    prefix /= part;
    std::error_code ec;
    const fs::file_status st = fs::status(prefix, ec);
    if (ec || !fs::exists(st)) return "";
    if (!fs::is_directory(st)) return prefix.string();
  }
  return "";
}

}  // namespace

std::string PrepareWritableDirectory(const std::string& flag, const std::string& path) {
  const std::string what = absl::StrCat("--", flag, "='", path, "'");
  if (path.empty()) return absl::StrCat(what, ": empty path");
  std::error_code ec;
  if (fs::exists(path, ec) && !fs::is_directory(path, ec)) return absl::StrCat(what, " is a file, not a directory");
  if (const std::string file = FirstNonDirectory(path); !file.empty()) {
    return absl::StrCat(what, " cannot be a directory: '", file, "' is a file");
  }
  fs::create_directories(path, ec);
  if (ec) return absl::StrCat(what, " cannot be created: ", ec.message());
  if (!fs::is_directory(path, ec)) return absl::StrCat(what, " is not a directory");
  // Unique among ranks that check one shared directory at once.
  const std::string probe = absl::StrCat(path, "/.write-probe-", ::getpid(), "-",
                                         std::chrono::steady_clock::now().time_since_epoch().count());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return absl::StrCat(what, " is not writable: ", std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

}  // namespace shardlight::tools::flags
