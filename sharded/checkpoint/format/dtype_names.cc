#include "sharded/checkpoint/format/dtype_names.h"

#include "sharded/checkpoint/format/names.h"
#include "sharded/dtype_table.h"

namespace shardlight::sharded::checkpoint {

std::optional<c10::ScalarType> DtypeFromName(absl::string_view name) {
  const DtypeInfo* d = FindDtypeByCheckpointName(name);
  if (d == nullptr) return std::nullopt;
  return d->dtype;
}

std::string UnknownDtypeMessage(absl::string_view name) {
  std::string why = UnavailableDtypeMessage(name);
  return why.empty() ? "unknown dtype " + Quote(name) : why;
}

std::string DtypeName(c10::ScalarType dtype) {
  const DtypeInfo* d = FindDtype(dtype);
  return d == nullptr ? "" : d->checkpoint_name;
}

}  // namespace shardlight::sharded::checkpoint
