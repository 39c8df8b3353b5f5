// The zip container of a torch.save file (also each item of a DCP .distcp
// file), read without LibTorch so that every size the archive declares is
// checked before anything is allocated or inflated.
//
// Open reads the end record (zip64 too) and the central directory, and checks
// the directory whole: every record lies inside the file and before the
// directory, a stored record's two sizes agree, a deflated record declares no
// more than deflate can produce from its compressed bytes, names are unique.
// It holds only the directory (about 80 bytes plus the name per record).
//
// A record is read only into a destination of the size the caller expects
// (ReadInto): stored records are read straight into it; deflate-compressed
// ones (zip allows them and torch.load reads them, though torch.save never
// writes them) are inflated from bounded input pieces (kInputChunk) straight
// into it, and stop with an error at the first byte beyond the declared size.
// The CRC-32 of what was read is checked.
//
// Every error is InvalidArgument naming the archive and, for a record, the
// record; a read failure of the file is passed on as it comes.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_ZIP_READER_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_ZIP_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sharded/checkpoint/storage/storage.h"

namespace shardlight::sharded::checkpoint::pytorch {

struct ZipRecord {
  std::string name;             // as stored: "archive/data/0"
  uint64_t size = 0;            // uncompressed bytes, as the directory declares
  uint64_t compressed_size = 0;
  uint64_t header_offset = 0;   // of its local header
  uint32_t crc32 = 0;
  uint16_t method = 0;          // 0 stored, 8 deflate
};

class ZipReader {
 public:
  static constexpr uint64_t kInputChunk = uint64_t{1} << 20;  // compressed bytes read at a time

  // `name` names the archive in errors (a path). InvalidArgument for a file
  // that is not a zip, a truncated one, a multi-disk or encrypted one, a
  // compression method other than stored/deflate, or an inconsistent
  // directory.
  // check_crc = false is for fuzzing only: mutated records then reach the
  // parsers behind the container instead of stopping at their CRC.
  static absl::StatusOr<ZipReader> Open(File file, std::string name, bool check_crc = true);

  // The archive that is bytes [begin, begin + length) of `file` (one item of
  // a DCP .distcp file: a run of torch.save archives). `file` must outlive
  // the reader. DataLoss when the range runs past the end of the file.
  static absl::StatusOr<ZipReader> OpenRange(const File& file, uint64_t begin, uint64_t length, std::string name,
                                             bool check_crc = true);

  // torch.save puts every record under one top folder (the file's stem at
  // save time, e.g. "archive/"): records are found by the name below it
  // ("data.pkl"). Null when there is none.
  const ZipRecord* Find(absl::string_view name) const;
  const std::string& top_folder() const { return top_; }
  const std::vector<ZipRecord>& records() const { return records_; }  // sorted by name

  // Reads `record` into `dst`, which holds `size` bytes: InvalidArgument
  // naming the record when the directory declares another size, when the
  // data inflates to more or fewer bytes, or when its CRC-32 differs.
  absl::Status ReadInto(const ZipRecord& record, void* dst, uint64_t size) const;

  // The whole record `name` (below the top folder) when it declares at most
  // `max_bytes`; NotFound when there is no such record.
  absl::StatusOr<std::string> ReadSmall(absl::string_view name, uint64_t max_bytes) const;

  // Where a stored record's bytes are in the file (absolute), for readers of
  // parts of it (a rank reads only what its shards overlap; its CRC-32 is
  // then not checked). InvalidArgument for a compressed record.
  absl::StatusOr<uint64_t> StoredDataOffset(const ZipRecord& record) const;

 private:
  ZipReader() = default;
  absl::Status Init();  // reads and checks the directory of [base_, base_ + size_)
  // Archive bytes [at, at + n) of the source file.
  absl::Status Read(void* dst, uint64_t n, uint64_t at) const;
  absl::Status Bad(const std::string& what) const;
  absl::Status BadRecord(const ZipRecord& r, const std::string& what) const;
  absl::Status ParseDirectory(const std::string& dir, uint64_t count);
  absl::StatusOr<uint64_t> DataOffset(const ZipRecord& r) const;
  absl::Status Inflate(const ZipRecord& r, uint64_t data, char* dst, uint64_t size, uint32_t* crc) const;

  std::unique_ptr<File> owned_;   // Open's file (stable address across moves)
  const File* source_ = nullptr;  // what is read: *owned_, or OpenRange's file
  uint64_t base_ = 0;             // the archive's first byte in the source
  uint64_t size_ = 0;             // the archive's bytes
  std::string name_;
  bool check_crc_ = true;
  std::string top_;            // "archive/" (with the slash)
  uint64_t directory_offset_ = 0;
  std::vector<ZipRecord> records_;
};

}  // namespace shardlight::sharded::checkpoint::pytorch

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_ZIP_READER_H_
