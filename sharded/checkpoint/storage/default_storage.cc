#include "sharded/checkpoint/storage/default_storage.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/storage/s3/s3_config.h"
#include "sharded/checkpoint/storage/s3/s3_storage.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {
namespace {

// Every operation fails with `error` (an s3:// path without a configuration).
class UnconfiguredStorage : public Storage {
 public:
  explicit UnconfiguredStorage(absl::Status error) : error_(std::move(error)) {}
  absl::StatusOr<std::unique_ptr<StorageFile>> OpenForRead(const std::string& path) override { return Fail(path); }
  absl::StatusOr<std::unique_ptr<StorageFile>> CreateNew(const std::string& path) override { return Fail(path); }
  absl::Status MakeDirectories(const std::string& dir) override { return Fail(dir); }
  absl::Status SyncDirectory(const std::string& dir) override { return Fail(dir); }
  absl::Status Rename(const std::string& from, const std::string&) override { return Fail(from); }
  absl::Status Remove(const std::string& path) override { return Fail(path); }
  bool Exists(const std::string&) override { return false; }
  absl::StatusOr<std::vector<std::string>> List(const std::string& dir) override { return Fail(dir); }

 private:
  absl::Status Fail(const std::string& path) const {
    return absl::InvalidArgumentError(absl::StrCat("cannot reach '", path, "': ", error_.message()));
  }
  absl::Status error_;
};

// The S3 storage for the environment's configuration now: one per distinct
// configuration (a test's server, then another's), kept for the process.
Storage& S3ForEnvironment() {
  static std::mutex mu;
  static auto* by_config = new std::map<std::string, std::shared_ptr<Storage>>();
  absl::StatusOr<s3::S3Config> config = s3::S3ConfigFromEnvironment();
  const std::string key =
      config.ok() ? absl::StrCat(config->credentials.access_key_id, "\n", config->credentials.secret_access_key, "\n",
                                 config->credentials.session_token, "\n", config->region, "\n", config->endpoint_url)
                  : absl::StrCat("error\n", config.status().message());
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<Storage>& storage = (*by_config)[key];
  if (storage == nullptr) {
    if (config.ok()) {
      storage = std::make_shared<s3::S3Storage>(std::shared_ptr<s3::S3Client>(s3::S3Client::Create(*config)));
    } else {
      storage = std::make_shared<UnconfiguredStorage>(config.status());
    }
  }
  return *storage;
}

Storage& For(const std::string& path) { return s3::IsS3Path(path) ? S3ForEnvironment() : PosixStorage(); }

class LocationStorage : public Storage {
 public:
  absl::StatusOr<std::unique_ptr<StorageFile>> OpenForRead(const std::string& path) override {
    return For(path).OpenForRead(path);
  }
  absl::StatusOr<std::unique_ptr<StorageFile>> CreateNew(const std::string& path) override {
    return For(path).CreateNew(path);
  }
  absl::Status MakeDirectories(const std::string& dir) override { return For(dir).MakeDirectories(dir); }
  absl::Status SyncDirectory(const std::string& dir) override { return For(dir).SyncDirectory(dir); }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    if (s3::IsS3Path(from) != s3::IsS3Path(to)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot rename '", from, "' to '", to, "': one is on S3 and the other is not"));
    }
    return For(from).Rename(from, to);
  }
  absl::Status Remove(const std::string& path) override { return For(path).Remove(path); }
  bool Exists(const std::string& path) override { return For(path).Exists(path); }
  absl::StatusOr<std::vector<std::string>> List(const std::string& dir) override { return For(dir).List(dir); }
  bool RenameIsCopy(const std::string& path) override { return For(path).RenameIsCopy(path); }
};

}  // namespace

Storage& DefaultStorage() {
  static auto* storage = new LocationStorage();
  return *storage;
}

absl::Status CheckLocation(const std::string& location) {
  if (!s3::IsS3Path(location)) return absl::OkStatus();
  const absl::StatusOr<s3::S3Config> config = s3::S3ConfigFromEnvironment();
  if (config.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("cannot reach '", location, "': ", config.status().message()));
}

absl::Status ProbeLocation(const std::string& location) {
  SL_RETURN_IF_ERROR(CheckLocation(location));
  if (!s3::IsS3Path(location)) return absl::OkStatus();
  SL_ASSIGN_OR_RETURN(const s3::S3Path where, s3::ParseS3Path(location));
  auto* storage = dynamic_cast<s3::S3Storage*>(&S3ForEnvironment());
  if (storage == nullptr) return absl::InternalError(absl::StrCat("cannot reach '", location, "': no S3 client"));
  const absl::Status listed =
      storage->client().ListObjects(where.bucket, where.key.empty() ? "" : where.key + "/", "/", 1, 1).status();
  if (listed.ok()) return listed;
  return absl::Status(listed.code(), absl::StrCat("cannot reach '", location, "': ", listed.message()));
}

Storage& StorageOrDefault(Storage* storage) { return storage != nullptr ? *storage : DefaultStorage(); }

}  // namespace shardlight::sharded::checkpoint
