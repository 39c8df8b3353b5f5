#include "sharded/checkpoint/storage/posix_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {
namespace {

// Larger single transfers are split: Linux caps one read/write near 2 GiB.
constexpr int64_t kMaxTransfer = int64_t{1} << 30;

std::string ErrorText(int error) {
  char buffer[256];
  // GNU strerror_r returns the message, possibly not in `buffer`.
  return strerror_r(error, buffer, sizeof(buffer));
}

absl::Status PosixError(int error, const std::string& op, const std::string& path) {
  return absl::Status(absl::ErrnoToStatusCode(error), absl::StrCat(op, " '", path, "': ", ErrorText(error)));
}

const char* FileTypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "of an unknown type";
}

// Why `path` could not be opened. A symbolic link that leads nowhere is not a
// missing file: it is FailedPrecondition naming the link and its target, so
// no caller takes it for "nothing here".
absl::Status OpenError(int error, const std::string& path) {
  struct stat st;
  if ((error != ENOENT && error != ELOOP) || ::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) {
    return PosixError(error, "cannot open", path);
  }
  char target[4096];
  const ssize_t n = ::readlink(path.c_str(), target, sizeof(target) - 1);
  const std::string to = n < 0 ? std::string("?") : std::string(target, static_cast<size_t>(n));
  return absl::FailedPreconditionError(
      error == ENOENT
          ? absl::StrCat("cannot open '", path, "': it is a dangling symbolic link (to '", to, "', which does not exist)")
          : absl::StrCat("cannot open '", path, "': it is a symbolic-link loop (to '", to, "'): ", ErrorText(error)));
}

class PosixFile : public StorageFile {
 public:
  PosixFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;
  ~PosixFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  absl::StatusOr<int64_t> Size() const override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return PosixError(errno, "cannot stat", path_);
    if (!S_ISREG(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat("'", path_, "' is not a regular file"));
    return static_cast<int64_t>(st.st_size);
  }

  absl::Status ReadAt(void* buffer, int64_t n, int64_t offset) const override {
    char* p = static_cast<char*>(buffer);
    while (n > 0) {
      const ssize_t got = ::pread(fd_, p, static_cast<size_t>(std::min(n, kMaxTransfer)), offset);
      if (got < 0) {
        if (errno == EINTR) continue;
        return PosixError(errno, "cannot read", path_);
      }
      if (got == 0) {
        return absl::OutOfRangeError(
            absl::StrCat("'", path_, "' ends at byte ", offset, " (", n, " more bytes expected)"));
      }
      p += got;
      n -= got;
      offset += got;
    }
    return absl::OkStatus();
  }

  absl::Status WriteAt(const void* buffer, int64_t n, int64_t offset) override {
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

  absl::Status Sync() override {
    if (::fsync(fd_) != 0) return PosixError(errno, "cannot fsync", path_);
    return absl::OkStatus();
  }

  absl::Status Close() override {
    const int fd = std::exchange(fd_, -1);
    if (fd >= 0 && ::close(fd) != 0) return PosixError(errno, "cannot close", path_);
    return absl::OkStatus();
  }

 private:
  int fd_;
  std::string path_;
};

class Posix : public Storage {
 public:
  absl::StatusOr<std::unique_ptr<StorageFile>> OpenForRead(const std::string& path) override {
    // O_NONBLOCK: opening a FIFO (or a device) for reading would otherwise
    // wait for a writer forever. The type is checked on the descriptor, so
    // nothing can swap the file between the check and the reads.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) return OpenError(errno, path);
    auto file = std::make_unique<PosixFile>(fd, path);
    struct stat st;
    if (::fstat(fd, &st) != 0) return PosixError(errno, "cannot stat", path);
    if (!S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("'", path, "' is ", FileTypeName(st.st_mode), ", not a regular file"));
    }
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) return PosixError(errno, "cannot set flags of", path);
    return file;
  }

  absl::StatusOr<std::unique_ptr<StorageFile>> CreateNew(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return PosixError(errno, "cannot create", path);
    return std::make_unique<PosixFile>(fd, path);
  }

  absl::Status MakeDirectories(const std::string& dir) override {
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

  absl::Status SyncDirectory(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PosixError(errno, "cannot open directory", dir);
    absl::Status status;
    if (::fsync(fd) != 0) status = PosixError(errno, "cannot fsync directory", dir);
    ::close(fd);
    return status;
  }

  absl::Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return PosixError(errno, absl::StrCat("cannot rename to '", to, "' from"), from);
    }
    return absl::OkStatus();
  }

  absl::Status Remove(const std::string& path) override {
    if (::unlink(path.c_str()) == 0 || errno == ENOENT) return absl::OkStatus();
    // Linux reports EISDIR for a directory, POSIX allows EPERM.
    if ((errno == EISDIR || errno == EPERM) && ::rmdir(path.c_str()) == 0) return absl::OkStatus();
    return PosixError(errno, "cannot remove", path);
  }

  bool Exists(const std::string& path) override {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0;  // a link counts, wherever it leads
  }

  absl::StatusOr<std::vector<std::string>> List(const std::string& dir) override {
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
};

}  // namespace

Storage& PosixStorage() {
  static Posix* const posix = new Posix();  // never destroyed: used from any thread until exit
  return *posix;
}

Storage& StorageOrPosix(Storage* storage) { return storage != nullptr ? *storage : PosixStorage(); }

absl::StatusOr<File> File::OpenForRead(Storage& storage, const std::string& path) {
  SL_ASSIGN_OR_RETURN(auto impl, storage.OpenForRead(path));
  return File(std::move(impl), path);
}

absl::StatusOr<File> File::CreateNew(Storage& storage, const std::string& path) {
  SL_ASSIGN_OR_RETURN(auto impl, storage.CreateNew(path));
  return File(std::move(impl), path);
}

absl::Status File::Close() {
  if (impl_ == nullptr) return absl::OkStatus();
  return impl_->Close();
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return absl::StrCat(dir, "/", name);
}

absl::StatusOr<std::string> ReadWholeFile(Storage& storage, const std::string& path, int64_t max_bytes) {
  SL_ASSIGN_OR_RETURN(const File file, File::OpenForRead(storage, path));
  SL_ASSIGN_OR_RETURN(const int64_t size, file.Size());
  if (size > max_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "' has ", size, " bytes; more than the ", max_bytes, " this reader accepts"));
  }
  std::string text(static_cast<size_t>(size), '\0');
  SL_RETURN_IF_ERROR(file.ReadAt(text.data(), size, 0));
  return text;
}

absl::Status WriteNewFile(Storage& storage, const std::string& path, const std::string& contents) {
  SL_ASSIGN_OR_RETURN(File file, File::CreateNew(storage, path));
  absl::Status s = file.WriteAt(contents.data(), static_cast<int64_t>(contents.size()), 0);
  if (s.ok()) s = file.Sync();
  if (s.ok()) s = file.Close();
  if (!s.ok() && !absl::IsAlreadyExists(s)) storage.Remove(path).IgnoreError();
  return s;
}

absl::Status MakeDirectories(const std::string& dir) { return PosixStorage().MakeDirectories(dir); }
absl::Status SyncDirectory(const std::string& dir) { return PosixStorage().SyncDirectory(dir); }
absl::Status RenameFile(const std::string& from, const std::string& to) { return PosixStorage().Rename(from, to); }
absl::Status RemoveFile(const std::string& path) { return PosixStorage().Remove(path); }
bool PathExists(const std::string& path) { return PosixStorage().Exists(path); }
absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir) { return PosixStorage().List(dir); }
absl::StatusOr<std::string> ReadWholeFile(const std::string& path, int64_t max_bytes) {
  return ReadWholeFile(PosixStorage(), path, max_bytes);
}

}  // namespace shardlight::sharded::checkpoint
