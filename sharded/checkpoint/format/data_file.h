// Writing one rank's data file: a safetensors file holding the given tensors
// as entries, streamed from the tensors' memory (or through a bounded buffer
// for non-contiguous or non-CPU tensors, and for entries whose bytes a
// callback produces tile by tile) with per-block CRC32C computed on the way
// out, then fsynced.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_DATA_FILE_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_DATA_FILE_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "sharded/checkpoint/storage/storage.h"

namespace shardlight::sharded::checkpoint {

// Fills `tile` (a contiguous CPU tensor) with the box of an entry that
// starts at `offsets` and has the tile's sizes.
using RegionFill = std::function<absl::Status(const std::vector<int64_t>& offsets, const at::Tensor& tile)>;

struct EntryToWrite {
  EntryToWrite() = default;
  EntryToWrite(std::string entry_name, at::Tensor entry_tensor)
      : name(std::move(entry_name)), tensor(std::move(entry_tensor)) {}

  std::string name;
  at::Tensor tensor;  // written row-major; any layout or device
  // When `tensor` is undefined: an entry of `dtype` and `sizes` whose bytes
  // `fill` produces, one row-major tile of at most the buffer at a time, so
  // the entry never has to be in memory whole. Its errors fail the write.
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::vector<int64_t> sizes;
  RegionFill fill;
};

struct WrittenEntry {
  std::string name;
  int64_t begin = 0;  // absolute byte range in the file
  int64_t end = 0;
  std::vector<uint32_t> block_crcs;
};

struct WrittenFile {
  int64_t bytes = 0;
  int64_t header_bytes = 0;
  std::vector<WrittenEntry> entries;  // in the order given
};

// Where the entries' bytes come from when not from their tensors: pieces of
// each entry's row-major bytes, handed over as they become available (an
// async save's staging area, staging.h). The writer calls Next for entry 0
// until it has all its bytes, then entry 1, ...; after writing and
// checksumming a piece it calls Release, and only then may the piece's
// memory be reused.
class EntryByteSource {
 public:
  struct Piece {
    const char* data = nullptr;
    int64_t size = 0;
  };
  virtual ~EntryByteSource() = default;
  // Blocks until the next piece of `entry` is there. An error (the
  // producer failed or gave up) ends the write with it.
  virtual absl::StatusOr<Piece> Next(size_t entry) = 0;
  virtual void Release() = 0;
};

struct DataFileOptions {
  int64_t block_bytes = 256 << 10;
  int64_t buffer_bytes = 16 << 20;
  std::map<std::string, std::string> metadata;  // the header's __metadata__
  Storage* storage = nullptr;  // null: DefaultStorage() (storage/default_storage.h: s3:// on S3, else POSIX)
  // Non-null: the entries' bytes come from here; their tensors give only
  // dtype and shape.
  EntryByteSource* source = nullptr;
};

// Creates `path` (which must not exist), writes the entries and fsyncs. On
// error (an exception included, returned as a status) the partial file is
// removed.
absl::StatusOr<WrittenFile> WriteDataFile(const std::string& path, const std::vector<EntryToWrite>& entries,
                                          const DataFileOptions& options);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_DATA_FILE_H_
