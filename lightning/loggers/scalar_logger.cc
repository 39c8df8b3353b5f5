#include "lightning/loggers/scalar_logger.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <cstdio>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace shardlight::lightning::loggers {

absl::Status CheckLogDir(const std::string& dir, const std::string& option, int probe_id) {
  namespace fs = std::filesystem;
  const std::string what = absl::StrCat("log directory ", dir, " of the ", option);
  if (dir.empty()) return absl::InvalidArgumentError(absl::StrCat("the log directory of the ", option, " is empty"));
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": it is a file, not a directory"));
  }
  fs::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat(what, ": cannot create it: ", ec.message()));
  const std::string probe = absl::StrCat(dir, "/.write_probe.", ::getpid(), ".", probe_id);
  std::FILE* f = std::fopen(probe.c_str(), "wb");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": it is not writable (", std::strerror(errno), ")"));
  }
  std::fclose(f);
  fs::remove(probe, ec);
  return absl::OkStatus();
}

LogFile::~LogFile() { (void)Close(); }

absl::Status LogFile::Open(const std::string& path, const char* mode) {
  (void)Close();
  path_ = path;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create the directory of ", path, ": ", ec.message()));
  file_ = std::fopen(path.c_str(), mode);
  if (file_ == nullptr) return absl::InternalError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  return absl::OkStatus();
}

absl::Status LogFile::Append(const std::string& bytes) {
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat(path_, " is not open"));
  errno = 0;
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size() || std::fflush(file_) != 0) {
    const int err = errno;
    std::clearerr(file_);
    return absl::InternalError(absl::StrCat("cannot write ", path_, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

absl::Status LogFile::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) return absl::InternalError(absl::StrCat("cannot close ", path_, ": ", std::strerror(errno)));
  return absl::OkStatus();
}

}  // namespace shardlight::lightning::loggers
