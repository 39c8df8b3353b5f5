// Read access to a checkpoint directory by one process: the parsed and
// validated index, and data files opened once each and checked against it
// (size, header length, and every entry the index places in the file: name,
// dtype, shape and byte range). Not collective; LoadCheckpoint runs one per
// rank and the ckpt tool runs one on its own.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_CHECKPOINT_READER_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_CHECKPOINT_READER_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "sharded/checkpoint/entry_reader.h"
#include "sharded/checkpoint/index.h"
#include "sharded/checkpoint/storage.h"

namespace shardlight::sharded::checkpoint {

class CheckpointReader {
 public:
  // Reads and validates DIR/index.json. NotFound when there is no index.
  static absl::StatusOr<CheckpointReader> Open(const std::string& dir, Storage& storage = PosixStorage());

  const CheckpointIndex& index() const { return *index_; }
  const std::string& dir() const { return dir_; }
  int64_t index_bytes() const { return index_bytes_; }
  // Bytes of data-file headers read so far.
  int64_t header_bytes_read() const { return header_bytes_read_; }
  int files_opened() const { return static_cast<int>(files_.size()); }

  // Opens file `name` of the index on first use and checks it; `key` is the
  // key that needs it, named in errors ("key 'w': data file 'f' ...").
  absl::StatusOr<const File*> OpenDataFile(const std::string& name, const std::string& key);

  // Where `shard` of `tensor` is, in an opened file.
  EntrySource SourceOf(const IndexTensor& tensor, const IndexShard& shard, const File* file) const;

 private:
  CheckpointReader() = default;
  absl::Status CheckFile(const File& file, const IndexFile& expected);

  Storage* storage_ = nullptr;
  std::string dir_;
  std::unique_ptr<CheckpointIndex> index_;  // stable address for EntrySource
  int64_t index_bytes_ = 0;
  int64_t header_bytes_read_ = 0;
  std::map<std::string, std::unique_ptr<File>> files_;
  // The shards the index places in each file.
  std::map<std::string, std::vector<std::pair<const IndexTensor*, const IndexShard*>>> shards_by_file_;
};

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_CHECKPOINT_READER_H_
