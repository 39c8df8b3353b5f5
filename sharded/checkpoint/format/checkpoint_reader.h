// Read access to a checkpoint directory by one process: the parsed and
// validated index, and data files opened once each and checked against it
// (size, header length, __metadata__, and every entry: the file holds exactly
// the entries the index places in it, with their dtype, shape and byte range). Not collective; LoadCheckpoint runs one per
// rank and the ckpt tool runs one on its own.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_CHECKPOINT_READER_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_CHECKPOINT_READER_H_

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sharded/checkpoint/format/entry_reader.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "sharded/checkpoint/storage/storage.h"

namespace shardlight::sharded::checkpoint {

// An index up to this size is read whatever the data; a larger one must be at
// most kIndexBytesPerDataByte times the size of the directory's data files
// (plus this). A real index takes well under 4 bytes per byte of the data
// file headers that describe the same shards. (It makes room for the most
// text an index's values may hold, which no data file pays for.)
constexpr int64_t kIndexBytesWithoutData = (int64_t{1} << 20) + kMaxValuesBytes;
constexpr int64_t kIndexBytesPerDataByte = 8;

// DIR/index.json's text, refused before it is read when it is larger than
// kMaxIndexBytes or than the limit above (FailedPrecondition), or when it is
// not a regular file. Errors start "checkpoint index".
absl::StatusOr<std::string> ReadIndexText(Storage& storage, const std::string& dir);

// The data files of a checkpoint in another format (interop/: PyTorch DCP):
// where each shard's bytes are, found on the shard's first use (a reader
// that needs one key of a file with many reads the headers of that key's
// payload only). Its entries carry no checksums.
class ForeignDataFiles {
 public:
  virtual ~ForeignDataFiles() = default;
  // Locates `shard` of `tensor` in `file` (the index's file `name`, open):
  // sets its begin and end to the absolute byte range of its row-major data.
  // Called at most once per shard that succeeds; the error names the file and
  // the shard's key.
  virtual absl::Status Locate(const File& file, const std::string& name, const IndexTensor& tensor,
                              IndexShard* shard) = 0;
};

class CheckpointReader {
 public:
  // Reads and validates DIR/index.json. NotFound when there is no index.
  static absl::StatusOr<CheckpointReader> Open(const std::string& dir, Storage& storage = DefaultStorage());

  // A checkpoint in another format: `index` (files and shards, checked by
  // the caller; shards' byte ranges are set by `files` as shards are first
  // used, OpenShard),
  // `index_bytes` the size of the metadata it came from, `format` what it is
  // ("PyTorch DCP"). block_bytes is the read unit (no checksums).
  static CheckpointReader OpenForeign(const std::string& dir, Storage& storage, CheckpointIndex index,
                                      int64_t index_bytes, std::string format, std::unique_ptr<ForeignDataFiles> files);

  // "shardlight" for our own format, else the foreign format's name.
  const std::string& format() const { return format_; }
  bool checksummed() const { return foreign_ == nullptr; }

  const CheckpointIndex& index() const { return *index_; }
  const std::string& dir() const { return dir_; }
  int64_t index_bytes() const { return index_bytes_; }
  // Bytes of data-file headers read so far.
  int64_t header_bytes_read() const { return header_bytes_read_; }
  int files_opened() const { return static_cast<int>(files_.size()); }

  // Opens file `name` of the index on first use and checks it (a foreign
  // format's files are only opened: their shards are checked by OpenShard);
  // `key` (may be empty) is the key that needs it, named in errors about the
  // file ("key 'w': data file 'f' is truncated"); an error about one entry
  // names that entry's key instead.
  absl::StatusOr<const File*> OpenDataFile(const std::string& name, const std::string& key);

  // OpenDataFile for the file of `shard` of `tensor` (of this reader's
  // index), and in a foreign format the shard located in it on first use
  // (ForeignDataFiles::Locate's errors). What a reader calls before SourceOf.
  absl::StatusOr<const File*> OpenShard(const IndexTensor& tensor, const IndexShard& shard, const std::string& key);

  // Opens and checks every file the index lists, needed or not, and every
  // shard in it (OpenShard): what a tool that reads the whole checkpoint
  // calls first. The first error.
  absl::Status CheckEveryFile();

  // Where `shard` of `tensor` is, in the file OpenShard returned for it.
  EntrySource SourceOf(const IndexTensor& tensor, const IndexShard& shard, const File* file) const;

 private:
  CheckpointReader() = default;
  void IndexShardsByFile();
  absl::Status CheckFile(const File& file, const IndexFile& expected);
  // FORMAT.md's __metadata__: format, the index's version, the file's rank.
  std::map<std::string, std::string> ExpectedMetadata(const IndexFile& expected) const;
  // Whether `text` (a header's N bytes) is exactly the header a save writes
  // for the shards `placed` in `expected` (EncodeSafetensorsHeader's
  // spelling), checked piece by piece without building that header.
  bool HeaderIsAsSaved(absl::string_view text,
                       const std::vector<std::pair<const IndexTensor*, IndexShard*>>& placed,
                       const IndexFile& expected) const;
  absl::Status CheckFileMetadata(const std::map<std::string, std::string>& metadata, const IndexFile& expected);

  Storage* storage_ = nullptr;
  std::string dir_;
  std::string format_ = "shardlight";
  std::unique_ptr<ForeignDataFiles> foreign_;
  std::unique_ptr<CheckpointIndex> index_;  // stable address for EntrySource
  int64_t index_bytes_ = 0;
  int64_t header_bytes_read_ = 0;
  std::map<std::string, std::unique_ptr<File>> files_;
  // The entry of files_ OpenDataFile returned last (map nodes stay put).
  const std::pair<const std::string, std::unique_ptr<File>>* last_file_ = nullptr;
  // Our format only: the open data file of each rank (null: not open yet).
  std::vector<const File*> file_of_rank_;
  // The shards the index places in each file.
  std::map<std::string, std::vector<std::pair<const IndexTensor*, IndexShard*>>> shards_by_file_;
  // A foreign format's shards (the index's, writable) and whether each is
  // located yet.
  std::unordered_map<const IndexShard*, std::pair<IndexShard*, bool>> foreign_shards_;
};

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_CHECKPOINT_READER_H_
