#include "sharded/global_random.h"

#include <ATen/core/grad_mode.h>

#include <cmath>

namespace shardlight::sharded {
namespace {

uint64_t Mix(uint64_t z) {  // splitmix64's finaliser
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double Unit(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }  // [0, 1)

}  // namespace

double GlobalRandomValue(uint64_t seed, uint64_t index, RandomKind kind) {
  const uint64_t h = Mix(Mix(seed) ^ index);
  if (kind == RandomKind::kUniform) return Unit(h);
  // Box-Muller from two independent draws; 1 - u keeps the log finite.
  const double u1 = 1.0 - Unit(h);
  const double u2 = Unit(Mix(h ^ 0x5851f42d4c957f2dULL));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

void FillGlobalRandom(at::Tensor& out, absl::Span<const int64_t> offsets,
                      absl::Span<const int64_t> global_sizes, uint64_t seed, RandomKind kind) {
  at::NoGradGuard no_grad;
  const int64_t n = out.numel();
  if (n == 0) return;
  const size_t nd = global_sizes.size();
  std::vector<int64_t> global_stride(nd, 1);
  for (int d = static_cast<int>(nd) - 2; d >= 0; --d) global_stride[d] = global_stride[d + 1] * global_sizes[d + 1];
  at::Tensor values = at::empty({n}, at::kDouble);
  double* v = values.data_ptr<double>();
  const std::vector<int64_t> sizes = out.sizes().vec();
  const int64_t inner = nd == 0 ? 1 : sizes[nd - 1];
  std::vector<int64_t> idx(nd, 0);  // position within the box, last dim excluded
  for (int64_t row = 0; row < n / inner; ++row) {
    uint64_t base = 0;
    for (size_t d = 0; d + 1 < nd; ++d) base += (offsets[d] + idx[d]) * global_stride[d];
    if (nd > 0) base += offsets[nd - 1];
    for (int64_t k = 0; k < inner; ++k) v[row * inner + k] = GlobalRandomValue(seed, base + k, kind);
    for (int d = static_cast<int>(nd) - 2; d >= 0; --d) {  // odometer over the outer dims
      if (++idx[d] < sizes[d]) break;
      idx[d] = 0;
    }
  }
  out.copy_(values.view(sizes));
}

}  // namespace shardlight::sharded
