#include "sharded/checkpoint/storage/s3/s3_storage.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <future>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "sharded/checkpoint/storage/s3/read_ranges.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint::s3 {
namespace {

constexpr char kScheme[] = "s3://";

absl::Status Prefixed(const absl::Status& s, absl::string_view what) {
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

std::string DirPrefix(const std::string& key) { return key.empty() ? "" : key + "/"; }

// Reads by ranged GETs. After a WillRead hint, the hinted ranges are
// joined across gaps of at most `join_gap` bytes and cut into pieces of at
// most `piece_bytes` (read_ranges.h), each one GET, fetched ahead
// `in_flight` at a time (the pieces held, fetched or fetching, never exceed
// that); a read the pieces cover is served from them, any other read is a
// GET of its own.
class S3ReadFile : public StorageFile {
 public:
  S3ReadFile(S3Client& client, S3Path where, std::string path, int64_t size, int64_t piece_bytes,
             int64_t join_gap, int in_flight)
      : client_(client),
        where_(std::move(where)),
        path_(std::move(path)),
        size_(size),
        piece_bytes_(std::max<int64_t>(1, piece_bytes)),
        join_gap_(std::max<int64_t>(0, join_gap)),
        in_flight_(std::max(1, in_flight)) {}

  absl::StatusOr<int64_t> Size() const override { return size_; }

  absl::Status ReadAt(void* buffer, int64_t n, int64_t offset) const override {
    if (offset < 0 || n < 0) return absl::InvalidArgumentError(absl::StrCat("'", path_, "': negative read"));
    if (n > 0 && offset + n <= size_) {
      absl::Status served;
      if (FromPieces(static_cast<char*>(buffer), n, offset, &served)) return served;
    }
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

  void WillRead(std::vector<ByteRange> ranges) const override {
    pieces_.clear();  // waits for fetches in flight
    for (const ReadRange& get : JoinReadRanges(std::move(ranges), size_, join_gap_, piece_bytes_)) {
      pieces_.emplace_back();
      pieces_.back().begin = get.first;
      pieces_.back().end = get.second;
    }
  }

  absl::Status WriteAt(const void*, int64_t, int64_t) override {
    return absl::FailedPreconditionError(absl::StrCat("'", path_, "' is open for reading"));
  }
  absl::Status Sync() override { return absl::OkStatus(); }
  absl::Status Close() override {
    pieces_.clear();
    return absl::OkStatus();
  }

 private:
  struct Piece {
    int64_t begin = 0, end = 0;
    std::unique_ptr<char[]> bytes;  // declared before `fetched`: outlives the fetch
    std::future<absl::Status> fetched;
    bool started = false;
  };

  // Starts fetches so that `in_flight_` pieces (from the front) are held.
  void Pump() const {
    int held = 0;
    for (Piece& p : pieces_) {
      if (held++ >= in_flight_) break;
      if (!p.started) Start(p);
    }
  }

  void Start(Piece& p) const {
    p.started = true;
    p.bytes.reset(new char[static_cast<size_t>(p.end - p.begin)]);
    p.fetched = std::async(std::launch::async, [this, &p] {
      absl::StatusOr<int64_t> got =
          client_.GetObjectRange(where_.bucket, where_.key, p.begin, p.end - p.begin, p.bytes.get());
      if (!got.ok()) return Prefixed(got.status(), absl::StrCat("cannot read '", path_, "'"));
      if (*got != p.end - p.begin) {
        return absl::OutOfRangeError(absl::StrCat("'", path_, "' ends at byte ", p.begin + *got, " (",
                                                  p.end - p.begin - *got, " more bytes expected)"));
      }
      return absl::OkStatus();
    });
  }

  // Whether the pieces cover [offset, offset + n); if so, copies them out
  // and sets *status.
  bool FromPieces(char* out, int64_t n, int64_t offset, absl::Status* status) const {
    while (!pieces_.empty() && pieces_.front().end <= offset) pieces_.pop_front();  // read past: done with
    int64_t pos = offset;
    size_t count = 0;
    for (; count < pieces_.size() && pos < offset + n; ++count) {
      if (pieces_[count].begin > pos) return false;
      pos = pieces_[count].end;
    }
    if (pos < offset + n) return false;
    Pump();
    for (size_t i = 0; i < count; ++i) {
      Piece& p = pieces_[i];
      if (!p.started) Start(p);  // one read wider than the window
      const absl::Status s = p.fetched.valid() ? p.fetched.get() : absl::OkStatus();
      if (!s.ok()) {
        pieces_.clear();
        *status = s;
        return true;
      }
      const int64_t from = std::max(offset, p.begin);
      const int64_t to = std::min(offset + n, p.end);
      std::memcpy(out + (from - offset), p.bytes.get() + (from - p.begin), static_cast<size_t>(to - from));
    }
    // The hint is read to its end: nothing stays held by a file done with.
    if (offset + n >= pieces_.back().end) pieces_.clear();
    *status = absl::OkStatus();
    return true;
  }

  S3Client& client_;
  const S3Path where_;
  const std::string path_;
  const int64_t size_;
  const int64_t piece_bytes_;
  const int64_t join_gap_;
  const int in_flight_;
  mutable std::deque<Piece> pieces_;  // the hint's pieces not yet read past, in order
};

// Buffers writes and uploads them front to back: one PutObject for a file
// under two parts, else a multipart upload whose parts go up on their own
// threads, `parts_in_flight` at a time (memory: about that many parts plus
// two being filled).
class S3WriteFile : public StorageFile {
 public:
  S3WriteFile(S3Client& client, S3Path where, std::string path, int64_t part_bytes, int parts_in_flight)
      : client_(client),
        where_(std::move(where)),
        path_(std::move(path)),
        part_bytes_(part_bytes),
        parts_in_flight_(std::max(1, parts_in_flight)) {}
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
    // Full parts go now, so memory stays bounded.
    while (static_cast<int64_t>(pending_.size()) >= 2 * part_bytes_) {
      std::string part = pending_.substr(0, static_cast<size_t>(part_bytes_));
      pending_.erase(0, static_cast<size_t>(part_bytes_));
      SL_RETURN_IF_ERROR(UploadPart(std::move(part)));
    }
    return absl::OkStatus();
  }

  // The object appears here (not before), and only if the key is free.
  absl::Status Sync() override { return Finish(); }
  absl::Status Close() override { return Finish(); }

 private:
  struct Part {
    std::string bytes;  // declared before `etag`: outlives the upload
    int number = 0;
    std::future<absl::StatusOr<std::string>> etag;
  };

  // Starts uploading `bytes` as the next part; waits for the oldest part in
  // flight when `parts_in_flight_` are.
  absl::Status UploadPart(std::string bytes) {
    if (upload_id_.empty()) {
      absl::StatusOr<std::string> id = client_.CreateMultipartUpload(where_.bucket, where_.key);
      if (!id.ok()) return Fail(id.status());
      upload_id_ = *id;
    }
    uploaded_ += static_cast<int64_t>(bytes.size());
    in_flight_.emplace_back();
    Part& part = in_flight_.back();
    part.bytes = std::move(bytes);
    part.number = ++parts_started_;
    part.etag = std::async(std::launch::async, [this, &part] {
      return client_.UploadPart(where_.bucket, where_.key, upload_id_, part.number, part.bytes);
    });
    while (static_cast<int>(in_flight_.size()) >= parts_in_flight_) {
      absl::Status s = CollectOldest();
      if (!s.ok()) return Fail(s);
    }
    return absl::OkStatus();
  }

  absl::Status CollectOldest() {
    Part& part = in_flight_.front();
    absl::StatusOr<std::string> etag = part.etag.get();
    const int number = part.number;
    in_flight_.pop_front();
    if (!etag.ok()) return etag.status();
    parts_.push_back({number, *etag});
    return absl::OkStatus();
  }

  // Every part in flight, the first error if any.
  absl::Status CollectAll() {
    absl::Status first;
    while (!in_flight_.empty()) first.Update(CollectOldest());
    return first;
  }

  absl::Status Finish() {
    if (done_) return final_;
    absl::Status s;
    if (upload_id_.empty()) {
      s = client_.PutObject(where_.bucket, where_.key, pending_, /*if_none_match=*/true).status();
    } else {
      if (!pending_.empty()) s = UploadPart(std::move(pending_));
      if (s.ok()) s = CollectAll();
      if (s.ok()) {
        s = client_.CompleteMultipartUpload(where_.bucket, where_.key, upload_id_, parts_, /*if_none_match=*/true)
                .status();
      }
    }
    pending_.clear();
    pending_.shrink_to_fit();
    if (!s.ok()) return Fail(s);
    done_ = true;
    return final_;
  }

  // Waits for the parts in flight, aborts an open multipart upload (no parts
  // left behind) and says what failed; the file is then done, and its
  // Sync and Close return the same error. Idempotent.
  absl::Status Fail(const absl::Status& s) {
    CollectAll().IgnoreError();
    if (!upload_id_.empty()) {
      client_.AbortMultipartUpload(where_.bucket, where_.key, upload_id_).IgnoreError();
      upload_id_.clear();
    }
    if (done_ && !final_.ok()) return final_;  // said already
    done_ = true;
    if (absl::IsFailedPrecondition(s)) {  // If-None-Match lost: the key was taken meanwhile
      final_ = absl::AlreadyExistsError(absl::StrCat("cannot create '", path_, "': it exists (", s.message(), ")"));
    } else {
      final_ = Prefixed(s, absl::StrCat("cannot write '", path_, "'"));
    }
    return final_;
  }

  S3Client& client_;
  const S3Path where_;
  const std::string path_;
  const int64_t part_bytes_;
  const int parts_in_flight_;
  std::string pending_;   // bytes from `uploaded_` on, not sent yet
  int64_t uploaded_ = 0;  // bytes handed to part uploads
  std::string upload_id_;
  int parts_started_ = 0;
  std::deque<Part> in_flight_;
  std::vector<CompletedPart> parts_;  // uploaded, in order
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
  return std::unique_ptr<StorageFile>(new S3ReadFile(*client_, std::move(where), path, info->size,
                                                     options_.read_piece_bytes, options_.read_join_gap_bytes,
                                                     options_.reads_in_flight));
}

absl::StatusOr<std::unique_ptr<StorageFile>> S3Storage::CreateNew(const std::string& path) {
  SL_ASSIGN_OR_RETURN(S3Path where, ParseS3Path(path));
  if (where.key.empty()) return absl::InvalidArgumentError(absl::StrCat("cannot create '", path, "': no key"));
  // Early, for a clear error before any bytes move; the upload's
  // If-None-Match is what actually keeps a racing writer out.
  absl::StatusOr<ObjectInfo> info = client_->HeadObject(where.bucket, where.key);
  if (info.ok()) return absl::AlreadyExistsError(absl::StrCat("cannot create '", path, "': it exists"));
  if (!absl::IsNotFound(info.status())) return Prefixed(info.status(), absl::StrCat("cannot create '", path, "'"));
  return std::unique_ptr<StorageFile>(new S3WriteFile(*client_, std::move(where), path, options_.part_bytes,
                                                      options_.parts_in_flight));
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
  if (!where->key.empty()) {
    const absl::Status head = client_->HeadObject(where->bucket, where->key).status();
    // Absent means the server said so. Any other answer (credentials, a
    // skewed clock, the server gone) is not "absent": the caller's open
    // then fails with the real error, naming it.
    if (head.ok() || !absl::IsNotFound(head)) return true;
  }
  absl::StatusOr<ListObjectsResult> list = client_->ListObjects(where->bucket, DirPrefix(where->key), "/", 1, 1);
  if (!list.ok()) return !absl::IsNotFound(list.status());
  return where->key.empty() || !list->objects.empty() || !list->common_prefixes.empty();
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
