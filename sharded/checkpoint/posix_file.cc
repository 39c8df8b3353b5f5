#include "sharded/checkpoint/posix_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shardlight::sharded::checkpoint {
namespace {

// Larger single transfers are split: Linux caps one read/write near 2 GiB.
constexpr int64_t kMaxTransfer = int64_t{1} << 30;

std::string ErrorText(int error) {
  char buffer[256];
  // GNU strerror_r returns the message, possibly not in `buffer`.
  return strerror_r(error, buffer, sizeof(buffer));
}

}  // namespace

absl::Status PosixError(int error, const std::string& op, const std::string& path) {
  return absl::Status(absl::ErrnoToStatusCode(error), absl::StrCat(op, " '", path, "': ", ErrorText(error)));
}

absl::StatusOr<File> File::OpenForRead(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return PosixError(errno, "cannot open", path);
  return File(fd, path);
}

absl::StatusOr<File> File::CreateNew(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return PosixError(errno, "cannot create", path);
  return File(fd, path);
}

File::File(File&& other) noexcept : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<int64_t> File::Size() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) return PosixError(errno, "cannot stat", path_);
  if (!S_ISREG(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat("'", path_, "' is not a regular file"));
  return static_cast<int64_t>(st.st_size);
}

absl::Status File::ReadAt(void* buffer, int64_t n, int64_t offset) const {
  char* p = static_cast<char*>(buffer);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, p, static_cast<size_t>(std::min(n, kMaxTransfer)), offset);
    if (got < 0) {
      if (errno == EINTR) continue;
      return PosixError(errno, "cannot read", path_);
    }
    if (got == 0) {
      return absl::OutOfRangeError(absl::StrCat("'", path_, "' ends at byte ", offset, " (", n, " more bytes expected)"));
    }
    p += got;
    n -= got;
    offset += got;
  }
  return absl::OkStatus();
}

absl::Status File::WriteAt(const void* buffer, int64_t n, int64_t offset) {
  const char* p = static_cast<const char*>(buffer);
  while (n > 0) {
    const ssize_t put = ::pwrite(fd_, p, static_cast<size_t>(std::min(n, kMaxTransfer)), offset);
    if (put < 0) {
      if (errno == EINTR) continue;
      return PosixError(errno, "cannot write", path_);
    }
    p += put;
    n -= put;
    offset += put;
  }
  return absl::OkStatus();
}

absl::Status File::Sync() {
  if (::fsync(fd_) != 0) return PosixError(errno, "cannot fsync", path_);
  return absl::OkStatus();
}

absl::Status File::Close() {
  const int fd = std::exchange(fd_, -1);
  if (fd >= 0 && ::close(fd) != 0) return PosixError(errno, "cannot close", path_);
  return absl::OkStatus();
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return absl::StrCat(dir, "/", name);
}

absl::Status MakeDirectories(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("checkpoint directory is empty");
  std::string prefix;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    prefix = dir.substr(0, pos);
    if (prefix.empty() || prefix == "/") continue;
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return PosixError(errno, "cannot create directory", prefix);
    }
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return PosixError(errno, "cannot stat", dir);
  if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat("'", dir, "' is not a directory"));
  return absl::OkStatus();
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return PosixError(errno, "cannot open directory", dir);
  absl::Status status;
  if (::fsync(fd) != 0) status = PosixError(errno, "cannot fsync directory", dir);
  ::close(fd);
  return status;
}

absl::Status RenameFile(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return PosixError(errno, absl::StrCat("cannot rename to '", to, "' from"), from);
  }
  return absl::OkStatus();
}

absl::Status RemoveFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return PosixError(errno, "cannot remove", path);
  return absl::OkStatus();
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return PosixError(errno, "cannot list directory", dir);
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, int64_t max_bytes) {
  auto file = File::OpenForRead(path);
  if (!file.ok()) return file.status();
  auto size = file->Size();
  if (!size.ok()) return size.status();
  if (*size > max_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "' has ", *size, " bytes; more than the ", max_bytes, " this reader accepts"));
  }
  std::string text(static_cast<size_t>(*size), '\0');
  absl::Status s = file->ReadAt(text.data(), *size, 0);
  if (!s.ok()) return s;
  return text;
}

}  // namespace shardlight::sharded::checkpoint
