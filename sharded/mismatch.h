// One wording for "this tensor does not fit where it is going", used wherever a
// value is checked against its destination: the state-dict hooks, a module's
// sharded members, metric states and the checkpoint load. The messages read
//   size mismatch for key "K": the state dict has [4, 7], the module has [4, 6]
//   dtype mismatch for key "K": the checkpoint has Float, the tensor to fill has Double
// with the two holders named by the caller. Keys are C-escaped, so a key
// from a hostile file cannot put raw bytes into a log.
#ifndef SHARDLIGHT_SHARDED_MISMATCH_H_
#define SHARDLIGHT_SHARDED_MISMATCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include <c10/core/ScalarType.h>

namespace shardlight::sharded {

// What one side of the comparison holds: who holds it ("the checkpoint",
// "the module") and the tensor's global sizes and dtype.
struct TensorFacts {
  absl::string_view holder;
  std::vector<int64_t> sizes;
  c10::ScalarType dtype;
};

// InvalidArgument "<what> mismatch for key "K": <source holder> has A, <target holder> has B".
absl::Status MismatchError(absl::string_view what, absl::string_view key, absl::string_view source_holder,
                           absl::string_view source_value, absl::string_view target_holder,
                           absl::string_view target_value);

// OK when sizes and dtypes agree; else the size mismatch (checked first) or
// the dtype mismatch, as MismatchError words it.
absl::Status CheckSizeAndDtype(absl::string_view key, const TensorFacts& source, const TensorFacts& target);

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_MISMATCH_H_
