// CPU autocast and bfloat16 collectives, the one seam that knows how
// LibTorch's versions differ for precision (lightning/precision.h). LibTorch
// 1.13 spells autocast at::autocast::set_cpu_enabled / set_autocast_cpu_dtype,
// 2.x set_autocast_enabled(kCPU) / set_autocast_dtype(kCPU) (the 1.13 names
// are deprecated there). Nothing else in shardlight calls at::autocast.
#ifndef SHARDLIGHT_LIGHTNING_AUTOCAST_COMPAT_H_
#define SHARDLIGHT_LIGHTNING_AUTOCAST_COMPAT_H_

#include <c10/core/ScalarType.h>

namespace shardlight::lightning {

// While alive, on this thread: CPU autocast to `dtype` (as Python's
// torch.autocast("cpu", dtype) scope: ops of the dispatcher's lower-precision
// list run in `dtype`, those of its fp32 list in float32). The previous state
// is restored on destruction, and the cast cache cleared when the outermost
// scope ends. `enabled` false: does nothing.
class CpuAutocast {
 public:
  explicit CpuAutocast(bool enabled, c10::ScalarType dtype = c10::ScalarType::BFloat16);
  ~CpuAutocast();
  CpuAutocast(const CpuAutocast&) = delete;
  CpuAutocast& operator=(const CpuAutocast&) = delete;

 private:
  bool enabled_;
  bool previous_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::BFloat16;
};

// Whether CPU autocast is on for this thread (tests).
bool CpuAutocastEnabled();

// Whether this LibTorch's gloo collectives take bfloat16 tensors (1.13's
// fail "Invalid scalar type"; 2.x's do): what bf16 under fsdp (all-gather of
// bf16 parameters) and model_parallel (TP all-reduce of bf16 activations)
// needs.
bool CollectivesCarryBf16();

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_AUTOCAST_COMPAT_H_
