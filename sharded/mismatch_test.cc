#include "sharded/mismatch.h"

#include <gtest/gtest.h>

namespace shardlight::sharded {
namespace {

TEST(MismatchTest, SizeIsCheckedBeforeDtypeAndBothSidesAreNamed) {
  const TensorFacts dict{"the state dict", {4, 7}, c10::kDouble};
  EXPECT_TRUE(CheckSizeAndDtype("w", dict, dict).ok());
  const absl::Status size = CheckSizeAndDtype("enc.w", dict, {"the module", {4, 6}, c10::kFloat});
  EXPECT_EQ(size.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(size.message(), "size mismatch for key \"enc.w\": the state dict has [4, 7], the module has [4, 6]");
  const absl::Status dtype = CheckSizeAndDtype("s", {"the checkpoint", {}, c10::kDouble},
                                               {"the tensor to fill", {}, c10::kFloat});
  EXPECT_EQ(dtype.message(), "dtype mismatch for key \"s\": the checkpoint has Double, the tensor to fill has Float");
}

TEST(MismatchTest, KeysAreEscaped) {
  const absl::Status s = MismatchError("size", "a\"b\n\xff", "the state dict", "[1]", "the metric", "[2]");
  EXPECT_EQ(s.message(), "size mismatch for key \"a\\\"b\\n\\xff\": the state dict has [1], the metric has [2]");
}

}  // namespace
}  // namespace shardlight::sharded
