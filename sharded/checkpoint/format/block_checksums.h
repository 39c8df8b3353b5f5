// Per-block CRC32C of a byte stream: block i covers bytes
// [i * block_bytes, (i + 1) * block_bytes) of the stream (the last may be
// short). Blocks, not whole entries, are what a checkpoint checksums, so a
// load that needs part of an entry verifies only the blocks it reads.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_BLOCK_CHECKSUMS_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_BLOCK_CHECKSUMS_H_

#include <cstdint>
#include <vector>

namespace shardlight::sharded::checkpoint {

class BlockChecksums {
 public:
  explicit BlockChecksums(int64_t block_bytes) : block_bytes_(block_bytes) {}

  // Feeds the next `n` bytes of the stream, in any chunking.
  void Update(const void* data, int64_t n);
  // The checksums of every block so far, the partial last one included.
  std::vector<uint32_t> Finish();

 private:
  int64_t block_bytes_;
  int64_t in_block_ = 0;  // bytes of the current block seen
  uint32_t crc_ = 0;
  std::vector<uint32_t> done_;
};

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_BLOCK_CHECKSUMS_H_
