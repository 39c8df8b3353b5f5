#include "sharded/checkpoint/format/block_checksums.h"

#include <algorithm>

#include "sharded/checkpoint/format/crc32c.h"

namespace shardlight::sharded::checkpoint {

void BlockChecksums::Update(const void* data, int64_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const int64_t take = std::min(n, block_bytes_ - in_block_);
    crc_ = Crc32cExtend(crc_, p, static_cast<size_t>(take));
    in_block_ += take;
    p += take;
    n -= take;
    if (in_block_ == block_bytes_) {
      done_.push_back(crc_);
      crc_ = 0;
      in_block_ = 0;
    }
  }
}

std::vector<uint32_t> BlockChecksums::Finish() {
  if (in_block_ > 0) done_.push_back(crc_);
  crc_ = 0;
  in_block_ = 0;
  return std::move(done_);
}

}  // namespace shardlight::sharded::checkpoint
