#include "sharded/checkpoint/format/crc32c.h"

#include <array>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#include "sharded/checkpoint/format/crc32c_fold.h"

namespace shardlight::sharded::checkpoint {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // Castagnoli, bit-reversed

// kTables[k][b]: the CRC of byte b followed by k zero bytes, so eight bytes
// are folded with eight lookups ("slicing-by-8").
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t;
  Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
      t[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; ++b) {
      for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
    }
  }
};

const Tables& GetTables() {
  static const Tables* tables = new Tables();
  return *tables;
}

uint64_t LoadLittleEndian64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

// The CRC register after feeding `n` bytes, without the pre/post inversion:
// Raw(r, data) is linear in r, which is what lets independent streams be
// combined below.
uint32_t RawPortable(uint32_t c, const unsigned char* p, size_t n) {
  const auto& t = GetTables().t;
  while (n >= 8) {
    const uint64_t v = LoadLittleEndian64(p) ^ c;
    c = t[7][v & 0xFF] ^ t[6][(v >> 8) & 0xFF] ^ t[5][(v >> 16) & 0xFF] ^ t[4][(v >> 24) & 0xFF] ^
        t[3][(v >> 32) & 0xFF] ^ t[2][(v >> 40) & 0xFF] ^ t[1][(v >> 48) & 0xFF] ^ t[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
    --n;
  }
  return c;
}

#if defined(__x86_64__)
// Bytes per stream in the three-stream loop.
constexpr size_t kStride = 4096;

// Raw(r, kStride zero bytes) as four byte-indexed tables: the operator that
// moves a stream's register past the kStride bytes the next stream covered.
struct ShiftTables {
  std::array<std::array<uint32_t, 256>, 4> t;
  ShiftTables() {
    static const unsigned char kZeros[kStride] = {};
    uint32_t basis[32];
    for (int bit = 0; bit < 32; ++bit) basis[bit] = RawPortable(1u << bit, kZeros, kStride);
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int bit = 0; bit < 8; ++bit) {
          if (b & (1u << bit)) v ^= basis[8 * k + bit];
        }
        t[k][b] = v;
      }
    }
  }
  uint32_t Shift(uint32_t r) const {
    return t[0][r & 0xFF] ^ t[1][(r >> 8) & 0xFF] ^ t[2][(r >> 16) & 0xFF] ^ t[3][r >> 24];
  }
};

const ShiftTables& GetShiftTables() {
  static const ShiftTables* tables = new ShiftTables();
  return *tables;
}

__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc, const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t c = ~crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  // Three independent streams over consecutive kStride-byte spans hide the
  // instruction's latency; their registers are then combined with
  // Raw(r, A B) = Shift(Raw(r, A)) ^ Raw(0, B).
  if (n >= 3 * kStride) {
    const ShiftTables& shift = GetShiftTables();
    while (n >= 3 * kStride) {
      uint64_t c1 = 0, c2 = 0;
      for (size_t i = 0; i < kStride; i += 8) {
        uint64_t a, b, d;
        std::memcpy(&a, p + i, 8);
        std::memcpy(&b, p + kStride + i, 8);
        std::memcpy(&d, p + 2 * kStride + i, 8);
        c = _mm_crc32_u64(c, a);
        c1 = _mm_crc32_u64(c1, b);
        c2 = _mm_crc32_u64(c2, d);
      }
      c = shift.Shift(shift.Shift(static_cast<uint32_t>(c)) ^ static_cast<uint32_t>(c1)) ^ static_cast<uint32_t>(c2);
      p += 3 * kStride;
      n -= 3 * kStride;
    }
  }
  while (n >= 8) {
    uint64_t a;
    std::memcpy(&a, p, 8);
    c = _mm_crc32_u64(c, a);
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  return ~static_cast<uint32_t>(c);
}
#endif

#if defined(__x86_64__)
uint32_t ExtendFoldingSse42(uint32_t crc, const void* data, size_t n) {
  return internal::ExtendFolding(crc, data, n, &ExtendSse42);
}
#endif

std::vector<Crc32cImplementation> FindImplementations() {
  std::vector<Crc32cImplementation> found;
#if defined(__x86_64__)
  if (internal::FoldingSupported()) found.push_back({"avx512-vpclmulqdq", &ExtendFoldingSse42});
  if (__builtin_cpu_supports("sse4.2")) found.push_back({"sse4.2", &ExtendSse42});
#endif
  found.push_back({"portable", &Crc32cExtendPortable});
  return found;
}

// The one in use: the fastest, unless a benchmark chose another.
std::atomic<const Crc32cImplementation*>& Chosen() {
  static std::atomic<const Crc32cImplementation*> chosen{&Crc32cImplementations().front()};
  return chosen;
}

}  // namespace

uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n) {
  return ~RawPortable(~crc, static_cast<const unsigned char*>(data), n);
}

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  return Chosen().load(std::memory_order_relaxed)->extend(crc, data, n);
}

bool Crc32cIsHardwareAccelerated() { return Chosen().load()->extend != &Crc32cExtendPortable; }

const std::vector<Crc32cImplementation>& Crc32cImplementations() {
  static const std::vector<Crc32cImplementation>* all = new std::vector<Crc32cImplementation>(FindImplementations());
  return *all;
}

const char* Crc32cImplementationName() { return Chosen().load()->name; }

bool UseCrc32cImplementation(const std::string& name) {
  for (const Crc32cImplementation& impl : Crc32cImplementations()) {
    if (name == impl.name) {
      Chosen().store(&impl);
      return true;
    }
  }
  return false;
}

}  // namespace shardlight::sharded::checkpoint
