// Reads regions of checkpoint entries into tensors, checking every byte
// against its block's CRC32C (and every BOOL byte against 0/1), with a
// fixed-size buffer.
//
// An entry holds one box of a global tensor, row-major, or (a PyTorch DCP
// item saved as a transposed or channels_last view) row-major over a
// permutation of its dims, `dim_order`: such an entry is read as the
// row-major box of the permuted dims into the permuted destination view, by
// the same bounded walk (no temporary of the entry's size). To fill a region of a
// destination tensor, the reader works out which bytes of the entry hold the
// region and reads only the checksum blocks that cover them:
// - when the region is one contiguous run in the entry and in a contiguous
//   CPU destination, the blocks wholly inside the run are read straight into
//   the destination and checked there; the (at most two) partial blocks at its
//   ends go through the buffer;
// - otherwise the region is cut into tiles whose byte span fits the buffer;
//   each tile's blocks are read into the buffer, checked, then copied out.
// The last blocks read stay in the buffer, so consecutive tiles never read a
// block twice. Peak memory is the buffer, whatever the tensor size.
//
// A checksum mismatch is DataLoss naming the file, the entry and the block.
// Bytes read straight into a destination are checked after they land there:
// on DataLoss that destination range holds unverified bytes (Verify first when
// that matters).
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_ENTRY_READER_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_ENTRY_READER_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "sharded/checkpoint/storage/storage.h"

namespace shardlight::sharded::checkpoint {

// The most bytes CopyAdjacent reads at once (and so holds in the buffer):
// small enough to be in cache when the checks and copies follow.
constexpr int64_t kCoalescedReadBytes = int64_t{1} << 20;

// One entry: where its bytes are and how to check them.
// Views only (built per read, so it copies nothing): what it names must
// outlive it.
struct EntrySource {
  const File* file = nullptr;
  absl::string_view file_name;   // for messages
  absl::string_view entry_name;  // for messages
  // >= 0: the entry is "<entry_name>/shard-<entry_shard>" (a derived name,
  // built only for a message).
  int64_t entry_shard = -1;
  c10::ScalarType dtype = c10::ScalarType::Float;
  absl::Span<const int64_t> offsets;  // the box the entry holds in the global tensor
  absl::Span<const int64_t> sizes;
  // Empty: row-major. Else stored dim j is dim dim_order[j] of the box (a
  // permutation; the outermost stored dim first).
  absl::Span<const int64_t> dim_order;
  int64_t begin = 0;  // absolute byte offset of the entry in the file
  int64_t block_bytes = 0;
  // CRC32C of each block; null for an entry of a format without checksums
  // (PyTorch DCP): its blocks are then only the unit of reading.
  // Points at the first of them (one per block).
  const uint32_t* block_crcs = nullptr;
};

// A whole entry bound for one run of contiguous CPU memory (its bytes).
struct EntryRun {
  EntrySource src;
  char* dst = nullptr;
};

struct ReadStats {
  int64_t bytes_read = 0;    // from data files, checked
  int64_t bytes_copied = 0;  // into destinations
};

class EntryReader {
 public:
  // The buffer is max(buffer_bytes, 4 blocks), allocated on first use.
  // LoadCheckpoint refuses indexes whose 4 blocks exceed buffer_bytes, so
  // there the buffer is buffer_bytes; the ckpt tool relies on the index's
  // 64 MiB cap on blocks (kMaxBlockBytes).
  EntryReader(int64_t buffer_bytes, ReadStats* stats);

  // Copies the box (region_offsets, region_sizes), in global coordinates and
  // inside both boxes, from `src` into `dst`, a tensor holding the box at
  // `dst_offsets` (any layout, any device; same dtype as the entry).
  absl::Status Copy(const EntrySource& src, const at::Tensor& dst, absl::Span<const int64_t> dst_offsets,
                    absl::Span<const int64_t> region_offsets, absl::Span<const int64_t> region_sizes);

  // The bytes of the entry's file (absolute offsets, [first, second)) that
  // reading the box (region_offsets, region_sizes) of the entry touches: the
  // checksum blocks from the box's first element to its last in stored order.
  // What a reader tells its file it will read (File::WillRead). An empty box
  // is an empty range.
  static ByteRange SpanOf(const EntrySource& src, absl::Span<const int64_t> region_offsets,
                          absl::Span<const int64_t> region_sizes);

  // Where the box (region_offsets, region_sizes) of `dst` starts when the box
  // is the whole entry and one run of `dst`, a contiguous CPU tensor of the
  // entry's dtype: then the entry can be read with its neighbours
  // (CopyAdjacent). Else null.
  static char* WholeEntryDestination(const EntrySource& src, const at::Tensor& dst,
                                     absl::Span<const int64_t> dst_offsets,
                                     absl::Span<const int64_t> region_offsets,
                                     absl::Span<const int64_t> region_sizes);

  // Copies whole entries that lie back to back in one file (each begins
  // where the one before ends, as a save writes them) with one read per
  // kCoalescedReadBytes: every block is checked in the buffer before the
  // entry is copied out, so a corrupt entry leaves its destination as it
  // was. On error `failed` is the position in `runs` of the entry it names.
  absl::Status CopyAdjacent(absl::Span<const EntryRun> runs, size_t* failed);

  // Reads and checks exactly the blocks Copy would read; writes nothing.
  absl::Status Verify(const EntrySource& src, absl::Span<const int64_t> region_offsets,
                      absl::Span<const int64_t> region_sizes);

  int64_t buffer_capacity() const { return capacity_; }

 private:
  absl::Status Walk(const EntrySource& src, const std::vector<int64_t>& strides, std::vector<int64_t> rel,
                    std::vector<int64_t> sizes, const at::Tensor& view, bool verify_only);
  absl::Status ReadRun(const EntrySource& src, int64_t begin, int64_t end, char* dst);
  absl::Status ThroughBuffer(const EntrySource& src, int64_t begin, int64_t end, char* dst);
  // Makes blocks [first, last) of `src` present and checked in the buffer;
  // returns the buffer address of block `first`.
  absl::StatusOr<char*> LoadBlocks(const EntrySource& src, int64_t first, int64_t last);
  absl::Status CheckBlock(const EntrySource& src, int64_t block, const char* data, int64_t n) const;
  int64_t Budget(const EntrySource& src);
  void Allocate(int64_t block_bytes);

  int64_t requested_bytes_;
  int64_t capacity_ = 0;
  std::unique_ptr<char[]> buffer_;
  ReadStats* stats_;
  // Which checked blocks the buffer holds: [cached_first_, cached_last_) of
  // the entry at (cached_file_, cached_begin_).
  const File* cached_file_ = nullptr;
  int64_t cached_begin_ = -1;
  int64_t cached_first_ = 0;
  int64_t cached_last_ = 0;
};

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_ENTRY_READER_H_
