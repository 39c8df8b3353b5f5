#include "lightning/autocast_compat.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace shardlight::lightning {
namespace {

#if TORCH_VERSION_MAJOR >= 2
bool Enabled() { return at::autocast::is_autocast_enabled(at::kCPU); }
void SetEnabled(bool on) { at::autocast::set_autocast_enabled(at::kCPU, on); }
c10::ScalarType Dtype() { return at::autocast::get_autocast_dtype(at::kCPU); }
void SetDtype(c10::ScalarType dtype) { at::autocast::set_autocast_dtype(at::kCPU, dtype); }
#else
bool Enabled() { return at::autocast::is_cpu_enabled(); }
void SetEnabled(bool on) { at::autocast::set_cpu_enabled(on); }
c10::ScalarType Dtype() { return at::autocast::get_autocast_cpu_dtype(); }
void SetDtype(c10::ScalarType dtype) { at::autocast::set_autocast_cpu_dtype(dtype); }
#endif

}  // namespace

CpuAutocast::CpuAutocast(bool enabled, c10::ScalarType dtype) : enabled_(enabled) {
  if (!enabled_) return;
  previous_enabled_ = Enabled();
  previous_dtype_ = Dtype();
  SetDtype(dtype);
  SetEnabled(true);
  at::autocast::increment_nesting();
}

CpuAutocast::~CpuAutocast() {
  if (!enabled_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  SetEnabled(previous_enabled_);
  SetDtype(previous_dtype_);
}

bool CpuAutocastEnabled() { return Enabled(); }

bool CollectivesCarryBf16() { return TORCH_VERSION_MAJOR >= 2; }

}  // namespace shardlight::lightning
