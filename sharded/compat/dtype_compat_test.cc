#include "sharded/compat/dtype_compat.h"

#include <gtest/gtest.h>
#include <torch/csrc/api/include/torch/version.h>

#include <set>
#include <string>

namespace shardlight::sharded::compat {
namespace {

const char* const kVersionedTorchNames[] = {"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                                            "uint16",        "uint32",      "uint64",          "float8_e8m0fnu"};

TEST(DtypeCompat, EachVersionedDtypeIsPresentOrExplained) {
  std::set<std::string> present;
  for (const NewerDtype& d : NewerDtypes()) {
    present.insert(d.torch_name);
    EXPECT_EQ(std::string(c10::toString(d.dtype)).empty(), false);
    EXPECT_EQ(c10::elementSize(d.dtype), std::string(d.torch_name).find("float8") == 0 ? 1u
                                         : std::string(d.torch_name) == "uint16"      ? 2u
                                         : std::string(d.torch_name) == "uint32"      ? 4u
                                                                                      : 8u)
        << d.torch_name;
    EXPECT_EQ(MissingDtypeMessage(d.torch_name), "");
    EXPECT_EQ(MissingDtypeMessage(d.checkpoint_name), "");
  }
  for (const char* name : kVersionedTorchNames) {
    const std::string message = MissingDtypeMessage(std::string("torch.") + name);
    EXPECT_NE(present.count(name) > 0, !message.empty()) << name << ": " << message;
  }
}

TEST(DtypeCompat, OtherNamesAreNotItsConcern) {
  EXPECT_EQ(MissingDtypeMessage("float32"), "");
  EXPECT_EQ(MissingDtypeMessage("F32"), "");
  EXPECT_EQ(MissingDtypeMessage("bits8"), "");
  EXPECT_EQ(MissingDtypeMessage(""), "");
}

#if TORCH_VERSION_MAJOR < 2
TEST(DtypeCompat, LibTorch113HasNoneAndSaysWhichReleaseDoes) {
  EXPECT_TRUE(NewerDtypes().empty());
  EXPECT_EQ(MissingDtypeMessage("F8_E4M3"),
            std::string("dtype float8_e4m3fn needs LibTorch >= 2.1; this build is ") + TORCH_VERSION);
  EXPECT_EQ(MissingDtypeMessage("torch.uint16"),
            std::string("dtype uint16 needs LibTorch >= 2.3; this build is ") + TORCH_VERSION);
}
#else
TEST(DtypeCompat, LibTorch2HasTheFloat8AndUnsignedDtypes) {
  // The pinned 2.x LibTorch (2.15) has all eight.
  ASSERT_EQ(NewerDtypes().size(), 8u);
  EXPECT_EQ(NewerDtypes()[0].dtype, c10::ScalarType::Float8_e4m3fn);
  EXPECT_STREQ(NewerDtypes()[0].checkpoint_name, "F8_E4M3");
}
#endif

}  // namespace
}  // namespace shardlight::sharded::compat
