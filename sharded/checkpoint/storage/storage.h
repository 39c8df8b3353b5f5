// Storage: the seam between checkpoints and where their bytes live. Save, load,
// verify and the ckpt tool reach files only through it, so a test can keep a
// checkpoint in memory or inject a fault at one operation, and an object store
// or an async writer can sit behind the same calls later.
//
// The interface is the handful of operations the atomic-commit protocol needs
// (checkpoint.h): create-exclusive, write at an offset, fsync, close, open,
// size, read a byte range, rename (atomic replacement), fsync of a directory
// (makes renames durable), list, remove, exists, mkdir -p. Every failure is an
// absl::Status naming the path. A read that meets the end of the file is
// OutOfRange ("ends at byte N"), which callers report as a truncated file.
//
// PosixStorage() is the default everywhere (a null storage in the options);
// InMemoryStorage (in_memory_storage.h) and FaultInjectingStorage
// (fault_injecting_storage.h) are the test implementations.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_STORAGE_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_STORAGE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardlight::sharded::checkpoint {

// Bytes [first, second) of a file.
using ByteRange = std::pair<int64_t, int64_t>;

// One open file. Not thread-safe; closed (errors ignored) on destruction.
class StorageFile {
 public:
  virtual ~StorageFile() = default;
  virtual absl::StatusOr<int64_t> Size() const = 0;
  virtual absl::Status ReadAt(void* buffer, int64_t n, int64_t offset) const = 0;
  virtual absl::Status WriteAt(const void* buffer, int64_t n, int64_t offset) = 0;
  // The data and the size are durable once it returns.
  virtual absl::Status Sync() = 0;
  virtual absl::Status Close() = 0;
  // A hint, for a file open for reading: the byte ranges the reads that
  // follow will cover, in the order they will be read (it replaces any
  // earlier hint). A store with a high latency per request (S3) fetches
  // them ahead, several at once; a local file ignores it. Reads outside the
  // hint, or out of its order, still return the right bytes.
  virtual void WillRead(std::vector<ByteRange> ranges) const {}
};

// A file system. Implementations are thread-safe: the ranks of a simulated
// cluster share one.
class Storage {
 public:
  virtual ~Storage() = default;
  virtual absl::StatusOr<std::unique_ptr<StorageFile>> OpenForRead(const std::string& path) = 0;
  // Fails with AlreadyExists if `path` exists: writers never clobber.
  virtual absl::StatusOr<std::unique_ptr<StorageFile>> CreateNew(const std::string& path) = 0;
  // mkdir -p; an existing directory is fine.
  virtual absl::Status MakeDirectories(const std::string& dir) = 0;
  // Makes renames and creations in `dir` durable.
  virtual absl::Status SyncDirectory(const std::string& dir) = 0;
  // Atomic replacement of `to`.
  virtual absl::Status Rename(const std::string& from, const std::string& to) = 0;
  // A file, or an empty directory (a checkpoint root's retention removes
  // step directories). A missing path is fine; a directory that still holds
  // entries is an error naming it.
  virtual absl::Status Remove(const std::string& path) = 0;
  // Whether `path` names an entry of any kind: a symbolic link counts
  // whether or not its target exists (a dangling index is there, broken, not
  // missing), so "absent" means only that nothing by that name is there.
  virtual bool Exists(const std::string& path) = 0;
  // Plain names in `dir` (files and subdirectories; no "." or ".."),
  // unsorted. Fails for a path that is not a directory.
  virtual absl::StatusOr<std::vector<std::string>> List(const std::string& dir) = 0;
  // Whether Rename at `path` is a copy of the bytes (an object store, which
  // has no rename) rather than a change of name. Such a store's CreateNew is
  // exclusive at the server (S3's If-None-Match: *), so commits there create
  // their file under its final name instead of renaming a temporary one.
  virtual bool RenameIsCopy(const std::string& path) { return false; }
};

// The local file system (open/pread/pwrite/fsync/rename/unlink). A process-wide
// instance.
Storage& PosixStorage();

// `storage`, or PosixStorage() when it is null: what the options' default means.
Storage& StorageOrPosix(Storage* storage);

// An open file as a value: what the readers and writers hold.
class File {
 public:
  static absl::StatusOr<File> OpenForRead(Storage& storage, const std::string& path);
  static absl::StatusOr<File> CreateNew(Storage& storage, const std::string& path);
  // On PosixStorage().
  static absl::StatusOr<File> OpenForRead(const std::string& path) { return OpenForRead(PosixStorage(), path); }
  static absl::StatusOr<File> CreateNew(const std::string& path) { return CreateNew(PosixStorage(), path); }

  File() = default;
  File(File&&) noexcept = default;
  File& operator=(File&&) noexcept = default;

  bool is_open() const { return impl_ != nullptr; }
  const std::string& path() const { return path_; }

  absl::StatusOr<int64_t> Size() const { return impl_->Size(); }
  absl::Status ReadAt(void* buffer, int64_t n, int64_t offset) const { return impl_->ReadAt(buffer, n, offset); }
  absl::Status WriteAt(const void* buffer, int64_t n, int64_t offset) { return impl_->WriteAt(buffer, n, offset); }
  absl::Status Sync() { return impl_->Sync(); }
  absl::Status Close();
  void WillRead(std::vector<ByteRange> ranges) const { impl_->WillRead(std::move(ranges)); }

 private:
  File(std::unique_ptr<StorageFile> impl, std::string path) : impl_(std::move(impl)), path_(std::move(path)) {}
  std::unique_ptr<StorageFile> impl_;
  std::string path_;
};

std::string JoinPath(const std::string& dir, const std::string& name);

// Creates `path` (exclusive: AlreadyExists if it is there, or appears
// before the close on a store whose CreateNew is exclusive at the server),
// writes `contents`, syncs and closes it; removes it again if a step after
// the create fails.
absl::Status WriteNewFile(Storage& storage, const std::string& path, const std::string& contents);

// The whole file, refusing (before allocating) one larger than `max_bytes`.
absl::StatusOr<std::string> ReadWholeFile(Storage& storage, const std::string& path, int64_t max_bytes);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_STORAGE_H_
