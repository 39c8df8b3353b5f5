// The dtypes that depend on the LibTorch version, in the one place that
// tests it. LibTorch 1.13 lacks the float8 and uint16/32/64 ScalarTypes that
// later releases added (and that torch 2.x's DCP and torch.save write); this
// library says which of them this build has and, for one it lacks, why.
// Everything else about dtypes (names, storage classes) is in
// sharded/dtype_table.h, which asks this library for the newer entries.
#ifndef SHARDLIGHT_SHARDED_COMPAT_DTYPE_COMPAT_H_
#define SHARDLIGHT_SHARDED_COMPAT_DTYPE_COMPAT_H_

#include <c10/core/ScalarType.h>

#include <string>
#include <string_view>
#include <vector>

namespace shardlight::sharded::compat {

// A dtype as the checkpoint format spells it ("U16", safetensors' name where
// it has one) and as torch spells it ("uint16", the attribute of `torch`).
struct NewerDtype {
  c10::ScalarType dtype;
  const char* checkpoint_name;
  const char* torch_name;
};

// The version-specific dtypes this LibTorch has (none on 1.13; on 2.7+ all
// of uint16, uint32, uint64 and the float8 formats e4m3fn, e5m2, e4m3fnuz,
// e5m2fnuz, e8m0fnu).
const std::vector<NewerDtype>& NewerDtypes();

// For a checkpoint or torch name ("F8_E4M3" or "float8_e4m3fn", with or
// without "torch.") of a version-specific dtype this LibTorch lacks: "dtype
// float8_e4m3fn needs LibTorch >= 2.1; this build is 1.13.1". "" for any
// other name.
std::string MissingDtypeMessage(std::string_view name);

}  // namespace shardlight::sharded::compat

#endif  // SHARDLIGHT_SHARDED_COMPAT_DTYPE_COMPAT_H_
