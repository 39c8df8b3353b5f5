// CRC32C by carry-less multiplication (AVX-512 VPCLMULQDQ): the message is
// folded 256 bytes a step into four 512-bit accumulators, which are then
// folded into 128 bits and finished with the CRC32 instruction. Several
// times the speed of the CRC32 instruction alone, so a load can check every
// block it reads for a small fraction of the cost of reading it. Private to
// crc32c.cc, which picks it at run time when the CPU has it.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_CRC32C_FOLD_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_CRC32C_FOLD_H_

#include <cstddef>
#include <cstdint>

namespace shardlight::sharded::checkpoint::internal {

using Crc32cExtendFn = uint32_t (*)(uint32_t crc, const void* data, size_t n);

// Whether this CPU (and OS) runs ExtendFolding: AVX-512F, VPCLMULQDQ,
// PCLMUL and SSE4.2. Always false off x86-64.
bool FoldingSupported();

// Crc32cExtend's contract. Messages shorter than kMinFoldBytes, and the last
// bytes that do not fill a 256-byte step, go to `short_path` (an SSE4.2
// CRC32 loop). Call only when FoldingSupported().
uint32_t ExtendFolding(uint32_t crc, const void* data, size_t n, Crc32cExtendFn short_path);

inline constexpr size_t kMinFoldBytes = 512;

}  // namespace shardlight::sharded::checkpoint::internal

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_CRC32C_FOLD_H_
