#include "sharded/checkpoint/storage/in_memory_storage.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shardlight::sharded::checkpoint {
namespace {

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

std::string Trimmed(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

}  // namespace

// A handle on a file's bytes; the storage's mutex guards them.
class InMemoryStorage::MemoryFile : public StorageFile {
 public:
  MemoryFile(std::mutex* mu, Bytes bytes, std::string path, bool writable)
      : mu_(mu), bytes_(std::move(bytes)), path_(std::move(path)), writable_(writable) {}

  absl::StatusOr<int64_t> Size() const override {
    std::lock_guard<std::mutex> lock(*mu_);
    return static_cast<int64_t>(bytes_->size());
  }
  absl::Status ReadAt(void* buffer, int64_t n, int64_t offset) const override {
    std::lock_guard<std::mutex> lock(*mu_);
    const int64_t size = static_cast<int64_t>(bytes_->size());
    if (offset + n > size) {
      return absl::OutOfRangeError(absl::StrCat("'", path_, "' ends at byte ", std::max(size, offset), " (",
                                                offset + n - std::max(size, offset), " more bytes expected)"));
    }
    std::memcpy(buffer, bytes_->data() + offset, static_cast<size_t>(n));
    return absl::OkStatus();
  }
  absl::Status WriteAt(const void* buffer, int64_t n, int64_t offset) override {
    if (!writable_) return absl::PermissionDeniedError(absl::StrCat("cannot write '", path_, "': opened for reading"));
    std::lock_guard<std::mutex> lock(*mu_);
    if (static_cast<int64_t>(bytes_->size()) < offset + n) bytes_->resize(static_cast<size_t>(offset + n));
    std::memcpy(bytes_->data() + offset, buffer, static_cast<size_t>(n));
    return absl::OkStatus();
  }
  absl::Status Sync() override { return absl::OkStatus(); }
  absl::Status Close() override { return absl::OkStatus(); }

 private:
  std::mutex* mu_;
  Bytes bytes_;
  std::string path_;
  bool writable_;
};

absl::StatusOr<std::unique_ptr<StorageFile>> InMemoryStorage::OpenForRead(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return absl::NotFoundError(absl::StrCat("cannot open '", path, "': No such file or directory"));
  return std::make_unique<MemoryFile>(&mu_, it->second, path, /*writable=*/false);
}

absl::StatusOr<std::unique_ptr<StorageFile>> InMemoryStorage::CreateNew(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (files_.count(path) > 0) return absl::AlreadyExistsError(absl::StrCat("cannot create '", path, "': File exists"));
  if (dirs_.count(Parent(path)) == 0) {
    return absl::NotFoundError(absl::StrCat("cannot create '", path, "': No such file or directory"));
  }
  Bytes bytes = std::make_shared<std::string>();
  files_[path] = bytes;
  return std::make_unique<MemoryFile>(&mu_, std::move(bytes), path, /*writable=*/true);
}

absl::Status InMemoryStorage::MakeDirectories(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("checkpoint directory is empty");
  std::lock_guard<std::mutex> lock(mu_);
  std::string d = Trimmed(dir);
  if (files_.count(d) > 0) return absl::FailedPreconditionError(absl::StrCat("'", d, "' is not a directory"));
  for (; !d.empty() && d != "/"; d = Parent(d)) dirs_.insert(d);
  return absl::OkStatus();
}

absl::Status InMemoryStorage::SyncDirectory(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  if (dirs_.count(Trimmed(dir)) == 0) {
    return absl::NotFoundError(absl::StrCat("cannot open directory '", dir, "': No such file or directory"));
  }
  return absl::OkStatus();
}

absl::Status InMemoryStorage::Rename(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(from);
  if (it == files_.end()) {
    return absl::NotFoundError(absl::StrCat("cannot rename to '", to, "' from '", from, "': No such file or directory"));
  }
  Bytes bytes = it->second;
  files_.erase(it);
  files_[to] = std::move(bytes);
  return absl::OkStatus();
}

absl::Status InMemoryStorage::Remove(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (files_.erase(path) > 0) return absl::OkStatus();
  const std::string d = Trimmed(path);
  if (dirs_.count(d) == 0) return absl::OkStatus();
  for (const auto& [file, bytes] : files_) {
    if (Parent(file) == d) return absl::FailedPreconditionError(absl::StrCat("cannot remove '", path, "': Directory not empty"));
  }
  for (const std::string& sub : dirs_) {
    if (Parent(sub) == d) return absl::FailedPreconditionError(absl::StrCat("cannot remove '", path, "': Directory not empty"));
  }
  dirs_.erase(d);
  return absl::OkStatus();
}

bool InMemoryStorage::Exists(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.count(path) > 0 || dirs_.count(Trimmed(path)) > 0;
}

absl::StatusOr<std::vector<std::string>> InMemoryStorage::List(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string d = Trimmed(dir);
  if (dirs_.count(d) == 0) {
    return absl::NotFoundError(absl::StrCat("cannot list directory '", dir, "': No such file or directory"));
  }
  std::vector<std::string> names;
  for (const auto& [path, bytes] : files_) {
    if (Parent(path) == d) names.push_back(path.substr(d.size() + 1));
  }
  for (const std::string& sub : dirs_) {
    if (sub != d && Parent(sub) == d) names.push_back(sub.substr(d.size() + 1));
  }
  return names;
}

std::vector<std::string> InMemoryStorage::Paths() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> paths;
  for (const auto& [path, bytes] : files_) paths.push_back(path);
  return paths;
}

}  // namespace shardlight::sharded::checkpoint
