#include "sharded/dtype_table.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace shardlight::sharded {
namespace {

TEST(DtypeTable, SpellingsAreUniqueAndRoundTrip) {
  std::set<std::string> checkpoint, torch;
  std::set<int> types;
  for (const DtypeInfo& d : KnownDtypes()) {
    EXPECT_TRUE(checkpoint.insert(d.checkpoint_name).second) << d.checkpoint_name;
    EXPECT_TRUE(torch.insert(d.torch_name).second) << d.torch_name;
    EXPECT_TRUE(types.insert(static_cast<int>(d.dtype)).second) << d.torch_name;
    EXPECT_EQ(FindDtype(d.dtype), &d);
    EXPECT_EQ(FindDtypeByCheckpointName(d.checkpoint_name), &d);
    EXPECT_EQ(FindDtypeByTorchName(d.torch_name), &d);
    EXPECT_EQ(FindDtypeByTorchName(std::string("torch.") + d.torch_name), &d);
    if (*d.storage_class != '\0') {
      EXPECT_EQ(FindDtypeByStorageClass(std::string("torch.") + d.storage_class), &d);
    }
    EXPECT_EQ(UnavailableDtypeMessage(d.checkpoint_name), "");
  }
  EXPECT_GE(KnownDtypes().size(), 13u);
}

TEST(DtypeTable, ClassicAndComplexSpellings) {
  EXPECT_STREQ(FindDtype(c10::kFloat)->checkpoint_name, "F32");
  EXPECT_STREQ(FindDtype(c10::kComplexFloat)->checkpoint_name, "C64");
  EXPECT_STREQ(FindDtype(c10::kComplexFloat)->storage_class, "ComplexFloatStorage");
  EXPECT_STREQ(FindDtype(c10::kComplexDouble)->checkpoint_name, "C128");
  EXPECT_STREQ(FindDtype(c10::ScalarType::ComplexHalf)->checkpoint_name, "C32");
  EXPECT_STREQ(FindDtype(c10::ScalarType::ComplexHalf)->storage_class, "");  // UntypedStorage + dtype
  EXPECT_EQ(FindDtypeByTorchName("torch.float")->dtype, c10::kFloat);
  EXPECT_EQ(FindDtypeByTorchName("cdouble")->dtype, c10::kComplexDouble);
  EXPECT_EQ(FindDtypeByStorageClass("torch.UntypedStorage"), nullptr);
}

TEST(DtypeTable, QuantizedAndBitDtypesHaveNoEntry) {
  EXPECT_EQ(FindDtype(c10::ScalarType::QInt8), nullptr);
  EXPECT_EQ(FindDtype(c10::ScalarType::QUInt4x2), nullptr);
  EXPECT_EQ(FindDtypeByTorchName("torch.qint8"), nullptr);
  EXPECT_EQ(FindDtypeByTorchName("torch.bits8"), nullptr);
  EXPECT_EQ(FindDtypeByCheckpointName("F4"), nullptr);
  EXPECT_EQ(UnavailableDtypeMessage("torch.bits8"), "");
}

// Every float8 / uint16..64 name has an entry or a reason (1.13: the reason).
TEST(DtypeTable, NewerDtypesAreThereOrExplained) {
  const char* const kNames[] = {"U16", "U32", "U64", "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0"};
  for (const char* name : kNames) {
    const bool known = FindDtypeByCheckpointName(name) != nullptr;
    EXPECT_NE(known, !UnavailableDtypeMessage(name).empty()) << name;
    if (known) {
      EXPECT_EQ(c10::elementSize(FindDtypeByCheckpointName(name)->dtype),
                name[0] == 'F' ? 1u : name[2] == '6' ? 2u : name[2] == '2' ? 4u : 8u)
          << name;
    } else {
      EXPECT_NE(UnavailableDtypeMessage(name).find("needs LibTorch >= 2."), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace shardlight::sharded
