#include "sharded/checkpoint/storage/s3/s3_storage.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint::s3 {
namespace {

constexpr char kScheme[] = "s3://";

absl::Status Prefixed(const absl::Status& s, absl::string_view what) {
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

std::string DirPrefix(const std::string& key) { return key.empty() ? "" : key + "/"; }

class S3ReadFile : public StorageFile {
 public:
  S3ReadFile(S3Client& client, S3Path where, std::string path, int64_t size)
      : client_(client), where_(std::move(where)), path_(std::move(path)), size_(size) {}

  absl::StatusOr<int64_t> Size() const override { return size_; }

  absl::Status ReadAt(void* buffer, int64_t n, int64_t offset) const override {
    if (offset < 0 || n < 0) return absl::InvalidArgumentError(absl::StrCat("'", path_, "': negative read"));
    const int64_t wanted = std::max<int64_t>(0, std::min(n, size_ - offset));
    int64_t got = 0;
    if (wanted > 0) {
      absl::StatusOr<int64_t> r = client_.GetObjectRange(where_.bucket, where_.key, offset, wanted, buffer);
      if (!r.ok()) return Prefixed(r.status(), absl::StrCat("cannot read '", path_, "'"));
      got = *r;
    }
    if (got < n) {
      // As PosixStorage says it: the caller reports a truncated file.
      return absl::OutOfRangeError(
          absl::StrCat("'", path_, "' ends at byte ", offset + got, " (", n - got, " more bytes expected)"));
    }
    return absl::OkStatus();
  }

  absl::Status WriteAt(const void*, int64_t, int64_t) override {
    return absl::FailedPreconditionError(absl::StrCat("'", path_, "' is open for reading"));
  }
  absl::Status Sync() override { return absl::OkStatus(); }
  absl::Status Close() override { return absl::OkStatus(); }

 private:
  S3Client& client_;
  const S3Path where_;
  const std::string path_;
  const int64_t size_;
};

class S3WriteFile : public StorageFile {
 public:
  S3WriteFile(S3Client& client, S3Path where, std::string path, int64_t part_bytes)
      : client_(client), where_(std::move(where)), path_(std::move(path)), part_bytes_(part_bytes) {}
  ~S3WriteFile() override { Close().IgnoreError(); }

  absl::StatusOr<int64_t> Size() const override { return uploaded_ + static_cast<int64_t>(pending_.size()); }

  absl::Status ReadAt(void*, int64_t, int64_t) const override {
    return absl::FailedPreconditionError(absl::StrCat("'", path_, "' is open for writing"));
  }

  absl::Status WriteAt(const void* buffer, int64_t n, int64_t offset) override {
    if (done_) return absl::FailedPreconditionError(absl::StrCat("'", path_, "' was already synced and uploaded"));
    if (offset < uploaded_) {
      return absl::FailedPreconditionError(absl::StrCat("cannot write '", path_, "' at byte ", offset,
                                                        ": bytes before ", uploaded_,
                                                        " are uploaded (S3 objects are written front to back)"));
    }
    const size_t at = static_cast<size_t>(offset - uploaded_);
    // A gap reads as zeros, as a sparse POSIX file does.
    if (pending_.size() < at + static_cast<size_t>(n)) pending_.resize(at + static_cast<size_t>(n), '\0');
    std::memcpy(pending_.data() + at, buffer, static_cast<size_t>(n));
    // Full parts go now, so memory stays bounded by about two parts.
    while (static_cast<int64_t>(pending_.size()) >= 2 * part_bytes_) {
      SL_RETURN_IF_ERROR(UploadPart(absl::string_view(pending_).substr(0, static_cast<size_t>(part_bytes_))));
      pending_.erase(0, static_cast<size_t>(part_bytes_));
    }
    return absl::OkStatus();
  }

  // The object appears here (not before), and only if the key is free.
  absl::Status Sync() override { return Finish(); }
  absl::Status Close() override { return Finish(); }

 private:
  absl::Status UploadPart(absl::string_view bytes) {
    if (upload_id_.empty()) {
      absl::StatusOr<std::string> id = client_.CreateMultipartUpload(where_.bucket, where_.key);
      if (!id.ok()) return Fail(id.status());
      upload_id_ = *id;
    }
    const int number = static_cast<int>(parts_.size()) + 1;
    absl::StatusOr<std::string> etag = client_.UploadPart(where_.bucket, where_.key, upload_id_, number, bytes);
    if (!etag.ok()) return Fail(etag.status());
    parts_.push_back({number, *etag});
    uploaded_ += static_cast<int64_t>(bytes.size());
    return absl::OkStatus();
  }

  absl::Status Finish() {
    if (done_) return final_;
    done_ = true;
    absl::Status s;
    if (upload_id_.empty()) {
      s = client_.PutObject(where_.bucket, where_.key, pending_, /*if_none_match=*/true).status();
    } else {
      if (!pending_.empty()) s = UploadPart(pending_);
      if (s.ok()) {
        s = client_.CompleteMultipartUpload(where_.bucket, where_.key, upload_id_, parts_, /*if_none_match=*/true)
                .status();
      }
    }
    pending_.clear();
    pending_.shrink_to_fit();
    final_ = s.ok() ? s : Fail(s);
    return final_;
  }

  // Aborts an open multipart upload (no parts left behind) and says what failed.
  absl::Status Fail(const absl::Status& s) {
    if (!upload_id_.empty()) {
      client_.AbortMultipartUpload(where_.bucket, where_.key, upload_id_).IgnoreError();
      upload_id_.clear();
    }
    done_ = true;
    if (absl::IsFailedPrecondition(s)) {  // If-None-Match lost: the key was taken meanwhile
      return absl::AlreadyExistsError(absl::StrCat("cannot create '", path_, "': it exists (", s.message(), ")"));
    }
    return Prefixed(s, absl::StrCat("cannot write '", path_, "'"));
  }

  S3Client& client_;
  const S3Path where_;
  const std::string path_;
  const int64_t part_bytes_;
  std::string pending_;   // bytes from `uploaded_` on, not sent yet
  int64_t uploaded_ = 0;  // bytes sent as parts
  std::string upload_id_;
  std::vector<CompletedPart> parts_;
  bool done_ = false;
  absl::Status final_;
};

}  // namespace

bool IsS3Path(absl::string_view path) { return absl::StartsWith(path, kScheme); }

absl::StatusOr<S3Path> ParseS3Path(absl::string_view path) {
  absl::string_view rest = path;
  if (!absl::ConsumePrefix(&rest, kScheme)) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not an s3://bucket/key location"));
  }
  const size_t slash = rest.find('/');
  S3Path out;
  out.bucket = std::string(rest.substr(0, slash));
  if (slash != absl::string_view::npos) {
    absl::string_view key = rest.substr(slash + 1);
    while (absl::ConsumeSuffix(&key, "/")) {
    }
    out.key = std::string(key);
  }
  if (out.bucket.empty()) return absl::InvalidArgumentError(absl::StrCat("'", path, "' names no bucket"));
  if (absl::StartsWith(out.key, "/") || absl::StrContains(out.key, "//")) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' has an empty path segment"));
  }
  return out;
}

S3Storage::S3Storage(std::shared_ptr<S3Client> client, S3StorageOptions options)
    : client_(std::move(client)), options_(options) {}

absl::StatusOr<std::shared_ptr<S3Storage>> S3Storage::FromEnvironment(S3StorageOptions options) {
  SL_ASSIGN_OR_RETURN(S3Config config, S3ConfigFromEnvironment());
  return std::make_shared<S3Storage>(std::shared_ptr<S3Client>(S3Client::Create(std::move(config))), options);
}

absl::StatusOr<std::unique_ptr<StorageFile>> S3Storage::OpenForRead(const std::string& path) {
  SL_ASSIGN_OR_RETURN(S3Path where, ParseS3Path(path));
  absl::StatusOr<ObjectInfo> info = client_->HeadObject(where.bucket, where.key);
  if (!info.ok()) return Prefixed(info.status(), absl::StrCat("cannot open '", path, "'"));
  return std::unique_ptr<StorageFile>(new S3ReadFile(*client_, std::move(where), path, info->size));
}

absl::StatusOr<std::unique_ptr<StorageFile>> S3Storage::CreateNew(const std::string& path) {
  SL_ASSIGN_OR_RETURN(S3Path where, ParseS3Path(path));
  if (where.key.empty()) return absl::InvalidArgumentError(absl::StrCat("cannot create '", path, "': no key"));
  // Early, for a clear error before any bytes move; the upload's
  // If-None-Match is what actually keeps a racing writer out.
  absl::StatusOr<ObjectInfo> info = client_->HeadObject(where.bucket, where.key);
  if (info.ok()) return absl::AlreadyExistsError(absl::StrCat("cannot create '", path, "': it exists"));
  if (!absl::IsNotFound(info.status())) return Prefixed(info.status(), absl::StrCat("cannot create '", path, "'"));
  return std::unique_ptr<StorageFile>(new S3WriteFile(*client_, std::move(where), path, options_.part_bytes));
}

absl::Status S3Storage::MakeDirectories(const std::string& dir) {
  SL_ASSIGN_OR_RETURN(const S3Path where, ParseS3Path(dir));
  if (where.key.empty()) return absl::OkStatus();  // the bucket
  const absl::Status s = client_->PutObject(where.bucket, DirPrefix(where.key), "").status();
  return s.ok() ? s : Prefixed(s, absl::StrCat("cannot create directory '", dir, "'"));
}

absl::Status S3Storage::SyncDirectory(const std::string& dir) { return ParseS3Path(dir).status(); }

absl::Status S3Storage::Rename(const std::string& from, const std::string& to) {
  SL_ASSIGN_OR_RETURN(const S3Path src, ParseS3Path(from));
  SL_ASSIGN_OR_RETURN(const S3Path dst, ParseS3Path(to));
  const std::string what = absl::StrCat("cannot rename '", from, "' to '", to, "'");
  if (src.bucket != dst.bucket) return absl::InvalidArgumentError(absl::StrCat(what, ": different buckets"));
  absl::Status s = client_->CopyObject(src.bucket, src.key, dst.key);
  if (s.ok()) s = client_->DeleteObject(src.bucket, src.key);
  return s.ok() ? s : Prefixed(s, what);
}

absl::Status S3Storage::Remove(const std::string& path) {
  SL_ASSIGN_OR_RETURN(const S3Path where, ParseS3Path(path));
  absl::StatusOr<ObjectInfo> file = client_->HeadObject(where.bucket, where.key);
  if (file.ok()) return client_->DeleteObject(where.bucket, where.key);
  if (!absl::IsNotFound(file.status())) return Prefixed(file.status(), absl::StrCat("cannot remove '", path, "'"));
  // Not a file: a directory (its marker, perhaps entries) or nothing.
  const std::string prefix = DirPrefix(where.key);
  SL_ASSIGN_OR_RETURN(const ListObjectsResult list, client_->ListObjects(where.bucket, prefix, "/", 2, 2));
  for (const ObjectInfo& o : list.objects) {
    if (o.key != prefix) {
      return absl::FailedPreconditionError(absl::StrCat("cannot remove directory '", path, "': it still holds entries"));
    }
  }
  if (!list.common_prefixes.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("cannot remove directory '", path, "': it still holds entries"));
  }
  return list.objects.empty() ? absl::OkStatus() : client_->DeleteObject(where.bucket, prefix);
}

bool S3Storage::Exists(const std::string& path) {
  absl::StatusOr<S3Path> where = ParseS3Path(path);
  if (!where.ok()) return false;
  if (!where->key.empty() && client_->HeadObject(where->bucket, where->key).ok()) return true;
  absl::StatusOr<ListObjectsResult> list = client_->ListObjects(where->bucket, DirPrefix(where->key), "/", 1, 1);
  return list.ok() && (where->key.empty() || !list->objects.empty() || !list->common_prefixes.empty());
}

absl::StatusOr<std::vector<std::string>> S3Storage::List(const std::string& dir) {
  SL_ASSIGN_OR_RETURN(const S3Path where, ParseS3Path(dir));
  const std::string prefix = DirPrefix(where.key);
  absl::StatusOr<ListObjectsResult> list = client_->ListObjects(where.bucket, prefix, "/");
  if (!list.ok()) return Prefixed(list.status(), absl::StrCat("cannot list '", dir, "'"));
  std::vector<std::string> names;
  bool marker = false;
  for (const ObjectInfo& o : list->objects) {
    if (o.key == prefix) {
      marker = true;
    } else {
      names.push_back(o.key.substr(prefix.size()));
    }
  }
  for (const std::string& p : list->common_prefixes) {
    names.push_back(p.substr(prefix.size(), p.size() - prefix.size() - 1));
  }
  if (names.empty() && !marker && !where.key.empty()) {
    if (client_->HeadObject(where.bucket, where.key).ok()) {
      return absl::FailedPreconditionError(absl::StrCat("cannot list '", dir, "': not a directory"));
    }
    return absl::NotFoundError(absl::StrCat("cannot list '", dir, "': no such directory"));
  }
  return names;
}

}  // namespace shardlight::sharded::checkpoint::s3
