// CRC32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum a
// checkpoint stores for every block of every entry.
//
// Chosen because x86-64 (SSE4.2) and ARMv8 compute it in hardware at several
// GB/s, so checksumming while streaming costs little next to the I/O. Where
// the CPU has AVX-512 VPCLMULQDQ, carry-less multiplication folds 256 bytes a
// step at several times the speed of the CRC32 instruction (crc32c_fold.h):
// what lets a load check every block for a small fraction of the cost of
// reading it. The portable path (slicing-by-8 tables) gives the same values
// on any machine.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_CRC32C_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shardlight::sharded::checkpoint {

// Extends `crc` (the CRC32C of some prefix; 0 for none) over `n` more bytes.
// Crc32cExtend(Crc32cExtend(0, a, na), b, nb) == CRC32C of a followed by b.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

// The table-driven implementation, exposed so tests can compare it with the
// hardware path Crc32cExtend picks at run time.
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n);

// Whether Crc32cExtend uses a hardware instruction on this machine.
bool Crc32cIsHardwareAccelerated();

// One way of computing Crc32cExtend; all give the same values.
struct Crc32cImplementation {
  const char* name;  // "avx512-vpclmulqdq", "sse4.2" or "portable"
  uint32_t (*extend)(uint32_t crc, const void* data, size_t n);
};

// The implementations this machine runs, fastest first; Crc32cExtend uses
// the first. For tests (each against the others) and benchmarks.
const std::vector<Crc32cImplementation>& Crc32cImplementations();

// The name of the one Crc32cExtend uses.
const char* Crc32cImplementationName();

// For benchmarks that compare implementations in one process: makes
// Crc32cExtend use the named one from now on (every thread); false when this
// machine does not run it.
bool UseCrc32cImplementation(const std::string& name);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_CRC32C_H_
