#include "sharded/checkpoint/format/dtype_names.h"

namespace shardlight::sharded::checkpoint {
namespace {

struct Name {
  c10::ScalarType dtype;
  const char* name;
};

// ShardedTensor's five dtypes first; the rest may appear in dense entries.
constexpr Name kNames[] = {
    {c10::ScalarType::Float, "F32"},   {c10::ScalarType::Double, "F64"}, {c10::ScalarType::BFloat16, "BF16"},
    {c10::ScalarType::Long, "I64"},    {c10::ScalarType::Bool, "BOOL"},  {c10::ScalarType::Half, "F16"},
    {c10::ScalarType::Int, "I32"},     {c10::ScalarType::Short, "I16"},  {c10::ScalarType::Char, "I8"},
    {c10::ScalarType::Byte, "U8"},
};

}  // namespace

std::optional<c10::ScalarType> DtypeFromName(absl::string_view name) {
  for (const Name& n : kNames) {
    if (name == n.name) return n.dtype;
  }
  return std::nullopt;
}

std::string DtypeName(c10::ScalarType dtype) {
  for (const Name& n : kNames) {
    if (dtype == n.dtype) return n.name;
  }
  return "";
}

}  // namespace shardlight::sharded::checkpoint
