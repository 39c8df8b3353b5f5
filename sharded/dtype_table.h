// Every dtype shardlight stores, with its spellings: the checkpoint format's
// name (safetensors' where it has one: "F32", "U16", "F8_E4M3", "C64"; ours
// where it has none: "F8_E4M3FNUZ", "F8_E5M2FNUZ", "C32", "C128"), torch's
// attribute name ("float32", the name DCP's .metadata and torch.save pickle
// as torch.<name>), and the legacy storage class torch.save pickles for it
// ("FloatStorage"; empty for the dtypes torch.save writes as a
// torch.storage.UntypedStorage plus the dtype, _rebuild_tensor_v3's form).
// The float8 and uint16/32/64 entries exist only when this LibTorch has them
// (sharded/compat/dtype_compat.h); for their names on an older LibTorch,
// UnavailableDtypeMessage says which release has them.
//
// Not stored (no entry): quantized dtypes, bits*, float4_e2m1fn_x2 (torch's
// DCP cannot save them either), and anything newer than the table.
#ifndef SHARDLIGHT_SHARDED_DTYPE_TABLE_H_
#define SHARDLIGHT_SHARDED_DTYPE_TABLE_H_

#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace shardlight::sharded {

struct DtypeInfo {
  c10::ScalarType dtype;
  const char* checkpoint_name;  // "F32"
  const char* torch_name;       // "float32"
  const char* storage_class;    // "FloatStorage", or "" (UntypedStorage)
};

// Every entry, in a fixed order (the ten classic dtypes first).
const std::vector<DtypeInfo>& KnownDtypes();

// nullptr when the table has no such entry.
const DtypeInfo* FindDtype(c10::ScalarType dtype);
const DtypeInfo* FindDtypeByCheckpointName(absl::string_view name);
// "float32", "torch.float32" and torch's aliases ("float", "torch.cfloat").
const DtypeInfo* FindDtypeByTorchName(absl::string_view name);
// "FloatStorage" or "torch.FloatStorage".
const DtypeInfo* FindDtypeByStorageClass(absl::string_view name);

// Why a name (either spelling) has no entry when a newer LibTorch has one
// ("dtype uint16 needs LibTorch >= 2.3; this build is 1.13.1"); "" when that
// is not the reason.
std::string UnavailableDtypeMessage(absl::string_view name);

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_DTYPE_TABLE_H_
