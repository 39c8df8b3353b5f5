#include "sharded/mismatch.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "sharded/shard_metadata.h"

namespace shardlight::sharded {

absl::Status MismatchError(absl::string_view what, absl::string_view key, absl::string_view source_holder,
                           absl::string_view source_value, absl::string_view target_holder,
                           absl::string_view target_value) {
  return absl::InvalidArgumentError(absl::StrCat(what, " mismatch for key \"", absl::CHexEscape(key), "\": ",
                                                 source_holder, " has ", source_value, ", ", target_holder, " has ",
                                                 target_value));
}

absl::Status CheckSizeAndDtype(absl::string_view key, const TensorFacts& source, const TensorFacts& target) {
  if (source.sizes != target.sizes) {
    return MismatchError("size", key, source.holder, ShapeToString(source.sizes), target.holder,
                         ShapeToString(target.sizes));
  }
  if (source.dtype != target.dtype) {
    return MismatchError("dtype", key, source.holder, c10::toString(source.dtype), target.holder,
                         c10::toString(target.dtype));
  }
  return absl::OkStatus();
}

}  // namespace shardlight::sharded
