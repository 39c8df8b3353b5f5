#include "sharded/dtype_table.h"

#include <utility>

#include "absl/strings/strip.h"
#include "sharded/compat/dtype_compat.h"

namespace shardlight::sharded {
namespace {

// The dtypes every supported LibTorch has. Complex numbers are (real,
// imaginary) pairs of the component type, little-endian like the rest.
constexpr DtypeInfo kClassic[] = {
    {c10::ScalarType::Float, "F32", "float32", "FloatStorage"},
    {c10::ScalarType::Double, "F64", "float64", "DoubleStorage"},
    {c10::ScalarType::BFloat16, "BF16", "bfloat16", "BFloat16Storage"},
    {c10::ScalarType::Long, "I64", "int64", "LongStorage"},
    {c10::ScalarType::Bool, "BOOL", "bool", "BoolStorage"},
    {c10::ScalarType::Half, "F16", "float16", "HalfStorage"},
    {c10::ScalarType::Int, "I32", "int32", "IntStorage"},
    {c10::ScalarType::Short, "I16", "int16", "ShortStorage"},
    {c10::ScalarType::Char, "I8", "int8", "CharStorage"},
    {c10::ScalarType::Byte, "U8", "uint8", "ByteStorage"},
    {c10::ScalarType::ComplexFloat, "C64", "complex64", "ComplexFloatStorage"},
    {c10::ScalarType::ComplexDouble, "C128", "complex128", "ComplexDoubleStorage"},
    {c10::ScalarType::ComplexHalf, "C32", "complex32", ""},
};

// torch's other names for the same dtypes (torch.float is torch.float32).
constexpr std::pair<const char*, const char*> kTorchAliases[] = {
    {"float", "float32"}, {"double", "float64"},  {"half", "float16"},     {"long", "int64"},
    {"int", "int32"},     {"short", "int16"},     {"cfloat", "complex64"}, {"cdouble", "complex128"},
    {"chalf", "complex32"},
};

absl::string_view WithoutTorch(absl::string_view name) {
  absl::ConsumePrefix(&name, "torch.");
  return name;
}

}  // namespace

const std::vector<DtypeInfo>& KnownDtypes() {
  static const std::vector<DtypeInfo> kAll = [] {
    std::vector<DtypeInfo> all(std::begin(kClassic), std::end(kClassic));
    for (const compat::NewerDtype& d : compat::NewerDtypes()) {
      all.push_back({d.dtype, d.checkpoint_name, d.torch_name, ""});
    }
    return all;
  }();
  return kAll;
}

const DtypeInfo* FindDtype(c10::ScalarType dtype) {
  for (const DtypeInfo& d : KnownDtypes()) {
    if (d.dtype == dtype) return &d;
  }
  return nullptr;
}

const DtypeInfo* FindDtypeByCheckpointName(absl::string_view name) {
  for (const DtypeInfo& d : KnownDtypes()) {
    if (name == d.checkpoint_name) return &d;
  }
  return nullptr;
}

const DtypeInfo* FindDtypeByTorchName(absl::string_view name) {
  name = WithoutTorch(name);
  for (const auto& [alias, canonical] : kTorchAliases) {
    if (name == alias) name = canonical;
  }
  for (const DtypeInfo& d : KnownDtypes()) {
    if (name == d.torch_name) return &d;
  }
  return nullptr;
}

const DtypeInfo* FindDtypeByStorageClass(absl::string_view name) {
  name = WithoutTorch(name);
  for (const DtypeInfo& d : KnownDtypes()) {
    if (*d.storage_class != '\0' && name == d.storage_class) return &d;
  }
  return nullptr;
}

std::string UnavailableDtypeMessage(absl::string_view name) {
  return compat::MissingDtypeMessage(std::string_view(name.data(), name.size()));
}

}  // namespace shardlight::sharded
