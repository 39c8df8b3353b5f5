// The safetensors layout every checkpoint data file (and the CLI's
// consolidated output) uses: an 8-byte little-endian header length N, N bytes
// of JSON mapping entry names to {"dtype", "shape", "data_offsets"} (plus an
// optional "__metadata__" string map), then the raw little-endian bytes, with
// data_offsets relative to the first byte after the header.
//
// Reading is defensive: the length is checked against a cap and the file size
// before anything is allocated, and every entry is checked (known dtype,
// non-negative shape, byte count = elements x element size, inside the data,
// no two entries overlapping) before a caller may use it.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_SAFETENSORS_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "sharded/checkpoint/storage/storage.h"

namespace shardlight::sharded::checkpoint {

// safetensors' own limit on the header length.
constexpr int64_t kMaxSafetensorsHeaderBytes = int64_t{100} << 20;

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // safetensors spelling, "F32"
  std::vector<int64_t> shape;
  int64_t begin = 0;  // data_offsets, relative to the data start
  int64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // sorted by begin
  std::map<std::string, std::string> metadata;
  int64_t header_bytes = 0;  // N
  int64_t data_start() const { return 8 + header_bytes; }
  // nullptr when absent.
  const SafetensorsEntry* Find(const std::string& name) const;
};

// Lays `entries` out back to back in order (begin/end set from dtype and
// shape); returns the data size. InvalidArgument for an unknown dtype or an
// overflowing size.
absl::StatusOr<int64_t> AssignDataOffsets(std::vector<SafetensorsEntry>& entries);

// The first data_start() bytes of a file holding `entries` (offsets set):
// length prefix plus JSON, space-padded so the data starts 8-byte aligned.
std::string EncodeSafetensorsHeader(const std::vector<SafetensorsEntry>& entries,
                                    const std::map<std::string, std::string>& metadata);

// EncodeSafetensorsHeader one entry at a time, from views: for a caller
// whose entries are not SafetensorsEntry values (a load spells the header it
// expects straight from the index, without copying a name or a shape).
//
// Or, built on a header's text, a check of that text instead of a writer:
// the same calls compare each piece with the text where it would be written
// (one spelling for both), and Matches says whether the text is exactly the
// header these calls write. A load checks a data file's header this way
// without building the header the index implies.
class SafetensorsHeaderWriter {
 public:
  SafetensorsHeaderWriter(const std::map<std::string, std::string>& metadata, size_t entries);
  // Checks `json`, a header's N bytes without its length prefix.
  SafetensorsHeaderWriter(absl::string_view json, const std::map<std::string, std::string>& metadata);
  void Add(absl::string_view name, absl::string_view dtype, absl::Span<const int64_t> shape, int64_t begin,
           int64_t end);
  // The header, as EncodeSafetensorsHeader writes it. Ends the writer.
  std::string Finish() &&;
  // Built on a text: whether the text is exactly what Finish would return,
  // without the length prefix. Ends the check.
  bool Matches() &&;

 private:
  void Begin(const std::map<std::string, std::string>& metadata);
  void Put(absl::string_view piece);
  void PutInt(int64_t value);
  void PutJsonString(absl::string_view text);
  void Close();

  std::string out_;          // writing: the prefix and what is written so far
  absl::string_view rest_;   // checking: the text not yet matched
  std::string quoted_;       // PutJsonString's buffer
  int64_t put_ = 0;          // bytes put after the prefix
  bool checking_ = false;
  bool matched_ = true;      // checking: every piece so far matched
  bool first_ = true;
};

// Reads the 8-byte header length N of `file` (size `file_size`) and checks
// that N header bytes fit in the file; `display_name` names the file in
// errors. `bytes_read` (optional) is increased by the bytes read.
absl::StatusOr<int64_t> ReadSafetensorsHeaderLength(const File& file, int64_t file_size,
                                                    const std::string& display_name, int64_t* bytes_read = nullptr);

// Reads and validates the header of `file`, whose size is `file_size`.
// `display_name` names the file in errors. `max_header_bytes` caps N.
// `bytes_read` (optional) is increased by the bytes read.
absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(const File& file, int64_t file_size,
                                                        const std::string& display_name,
                                                        int64_t max_header_bytes = kMaxSafetensorsHeaderBytes,
                                                        int64_t* bytes_read = nullptr);

// Parses and validates header JSON already in memory (N bytes) for a file
// whose data region has `data_bytes` bytes.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const std::string& json, int64_t data_bytes,
                                                         const std::string& display_name);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_SAFETENSORS_H_
