// Folding CRC32C. The arithmetic, in the bit order CRC32C uses (the first
// bit of the message is the lowest bit of its first byte, and the highest
// power of x):
// - 16 message bytes loaded little-endian are a 128-bit value whose bit j is
//   the coefficient of x^(127-j); its low 64 bits H carry x^127..x^64, its
//   high 64 bits L carry x^63..x^0.
// - A carry-less product of two such 64-bit halves a, b is x * a(x) * b(x)
//   in the same 128-bit order (the product's top bit is always zero).
// - Moving a 128-bit piece X forward by D bits, to add it into the piece D
//   bits later, needs X * x^D mod P = H * x^(64+D) + L * x^D (mod P), which is
//   clmul(H, x^(63+D) mod P) ^ clmul(L, x^(D-1) mod P): two products with
//   constants of degree < 32 (the factor x of each product is taken out of
//   the constant).
// - Folding keeps the value congruent to the message mod P, so when all of
//   it has been folded into the last 16 bytes, those bytes' CRC (the CRC32
//   instruction over two words) is the message's.
// The constants are computed once from P, not copied from tables.
#include "sharded/checkpoint/format/crc32c_fold.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 intrinsics start from deliberately undefined registers,
// which -Wmaybe-uninitialized reports at every use.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

namespace shardlight::sharded::checkpoint::internal {

#if defined(__x86_64__)
namespace {

#define SL_FOLD_TARGET __attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.2")))

// x^n mod P, P = CRC32C's polynomial x^32 + 0x1EDC6F41; bit i is x^i.
uint32_t XPowModP(int n) {
  uint64_t v = 1;
  for (int i = 0; i < n; ++i) {
    v <<= 1;
    if (v >> 32) v ^= 0x11EDC6F41ull;
  }
  return static_cast<uint32_t>(v);
}

// A polynomial of degree < 32 as a 64-bit operand of the message's bit
// order: x^i at bit 63 - i.
uint64_t AsOperand(uint32_t p) {
  uint64_t r = 0;
  for (int i = 0; i < 32; ++i) {
    if ((p >> i) & 1) r |= uint64_t{1} << (63 - i);
  }
  return r;
}

// The pair of constants that moves a 128-bit piece forward by `bits`:
// multiplied with H (low word) and L (high word) respectively.
struct FoldConstant {
  uint64_t for_high_powers;
  uint64_t for_low_powers;
};

FoldConstant ForDistance(int bits) { return {AsOperand(XPowModP(bits + 63)), AsOperand(XPowModP(bits - 1))}; }

struct Constants {
  FoldConstant by_2048 = ForDistance(2048);  // one 256-byte step
  FoldConstant by_512 = ForDistance(512);    // accumulator k into k + 1
  FoldConstant by_384 = ForDistance(384);    // the four 128-bit lanes of the last accumulator
  FoldConstant by_256 = ForDistance(256);
  FoldConstant by_128 = ForDistance(128);
};

const Constants& GetConstants() {
  static const Constants* constants = new Constants();
  return *constants;
}

SL_FOLD_TARGET inline __m512i Broadcast(const FoldConstant& k) {
  return _mm512_broadcast_i32x4(_mm_set_epi64x(static_cast<int64_t>(k.for_low_powers),
                                               static_cast<int64_t>(k.for_high_powers)));
}

// x moved forward (lane by lane) and added to y.
SL_FOLD_TARGET inline __m512i Fold512(__m512i x, __m512i k, __m512i y) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11), y,
                                   0x96);  // a ^ b ^ c
}

SL_FOLD_TARGET inline __m128i Fold128(__m128i x, const FoldConstant& k, __m128i y) {
  const __m128i kk =
      _mm_set_epi64x(static_cast<int64_t>(k.for_low_powers), static_cast<int64_t>(k.for_high_powers));
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, kk, 0x00), _mm_clmulepi64_si128(x, kk, 0x11)), y);
}

SL_FOLD_TARGET uint32_t Fold(uint32_t crc, const unsigned char* p, size_t n, Crc32cExtendFn short_path) {
  const Constants& k = GetConstants();
  // The running CRC enters as the first 32 bits of the message (inverted,
  // as CRC32C's register starts).
  __m512i x0 = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(~crc))));
  __m512i x1 = _mm512_loadu_si512(p + 64);
  __m512i x2 = _mm512_loadu_si512(p + 128);
  __m512i x3 = _mm512_loadu_si512(p + 192);
  p += 256;
  n -= 256;
  const __m512i step = Broadcast(k.by_2048);
  while (n >= 256) {
    x0 = Fold512(x0, step, _mm512_loadu_si512(p));
    x1 = Fold512(x1, step, _mm512_loadu_si512(p + 64));
    x2 = Fold512(x2, step, _mm512_loadu_si512(p + 128));
    x3 = Fold512(x3, step, _mm512_loadu_si512(p + 192));
    p += 256;
    n -= 256;
  }
  const __m512i next = Broadcast(k.by_512);
  x1 = Fold512(x0, next, x1);
  x2 = Fold512(x1, next, x2);
  x3 = Fold512(x2, next, x3);
  __m128i r = _mm512_extracti32x4_epi32(x3, 3);
  r = Fold128(_mm512_extracti32x4_epi32(x3, 0), k.by_384, r);
  r = Fold128(_mm512_extracti32x4_epi32(x3, 1), k.by_256, r);
  r = Fold128(_mm512_extracti32x4_epi32(x3, 2), k.by_128, r);
  uint64_t c = _mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(r)));
  c = _mm_crc32_u64(c, static_cast<uint64_t>(_mm_extract_epi64(r, 1)));
  return short_path(~static_cast<uint32_t>(c), p, n);
}

}  // namespace

bool FoldingSupported() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq") &&
         __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.2");
}

uint32_t ExtendFolding(uint32_t crc, const void* data, size_t n, Crc32cExtendFn short_path) {
  if (n < kMinFoldBytes) return short_path(crc, data, n);
  return Fold(crc, static_cast<const unsigned char*>(data), n, short_path);
}

#else

bool FoldingSupported() { return false; }

uint32_t ExtendFolding(uint32_t crc, const void* data, size_t n, Crc32cExtendFn short_path) {
  return short_path(crc, data, n);
}

#endif

}  // namespace shardlight::sharded::checkpoint::internal
