#include "sharded/compat/dtype_compat.h"

#include <torch/csrc/api/include/torch/version.h>

namespace shardlight::sharded::compat {
namespace {

// Every version-specific dtype, with the LibTorch release that added it.
struct Versioned {
  const char* checkpoint_name;
  const char* torch_name;
  int major, minor;
};
constexpr Versioned kVersioned[] = {
    {"F8_E4M3", "float8_e4m3fn", 2, 1},       {"F8_E5M2", "float8_e5m2", 2, 1},
    {"F8_E4M3FNUZ", "float8_e4m3fnuz", 2, 2}, {"F8_E5M2FNUZ", "float8_e5m2fnuz", 2, 2},
    {"U16", "uint16", 2, 3},                  {"U32", "uint32", 2, 3},
    {"U64", "uint64", 2, 3},                  {"F8_E8M0", "float8_e8m0fnu", 2, 7},
};

constexpr bool Has(int major, int minor) {
  return TORCH_VERSION_MAJOR > major || (TORCH_VERSION_MAJOR == major && TORCH_VERSION_MINOR >= minor);
}

// kVersioned[i] as this build's ScalarType.
[[maybe_unused]] void Add(std::vector<NewerDtype>* out, c10::ScalarType dtype, int i) {
  out->push_back({dtype, kVersioned[i].checkpoint_name, kVersioned[i].torch_name});
}

}  // namespace

const std::vector<NewerDtype>& NewerDtypes() {
  static const std::vector<NewerDtype> kDtypes = [] {
    std::vector<NewerDtype> out;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
    Add(&out, c10::ScalarType::Float8_e4m3fn, 0);
    Add(&out, c10::ScalarType::Float8_e5m2, 1);
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
    Add(&out, c10::ScalarType::Float8_e4m3fnuz, 2);
    Add(&out, c10::ScalarType::Float8_e5m2fnuz, 3);
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
    Add(&out, c10::ScalarType::UInt16, 4);
    Add(&out, c10::ScalarType::UInt32, 5);
    Add(&out, c10::ScalarType::UInt64, 6);
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 7)
    Add(&out, c10::ScalarType::Float8_e8m0fnu, 7);
#endif
    return out;
  }();
  return kDtypes;
}

std::string MissingDtypeMessage(std::string_view name) {
  if (name.substr(0, 6) == "torch.") name.remove_prefix(6);
  for (const Versioned& v : kVersioned) {
    if (name != v.checkpoint_name && name != v.torch_name) continue;
    if (Has(v.major, v.minor)) return "";
    return std::string("dtype ") + v.torch_name + " needs LibTorch >= " + std::to_string(v.major) + "." +
           std::to_string(v.minor) + "; this build is " + TORCH_VERSION;
  }
  return "";
}

}  // namespace shardlight::sharded::compat
