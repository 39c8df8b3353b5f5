// Payload layouts: a torch.save archive (PyTorchStreamWriter + our pickle
// writer) of one tensor with given strides, located by TorchSavePayload:
// row-major and dense permuted layouts (transposed, channels_last) are
// located with their dim order; hostile strides are errors naming them.
#include "sharded/checkpoint/interop/pytorch/torch_save_payload.h"

#include <caffe2/serialize/inline_container.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sharded/checkpoint/interop/pytorch/torch_export.h"
#include "sharded/checkpoint/storage/in_memory_storage.h"

namespace shardlight::sharded::checkpoint::pytorch {
namespace {

using ::testing::HasSubstr;

// The archive of one `dtype` tensor over a storage of `numel` elements.
std::string Archive(c10::ScalarType dtype, int64_t numel, int64_t offset, const std::vector<int64_t>& sizes,
                    const std::vector<int64_t>& strides) {
  TorchPickleWriter p;
  EXPECT_TRUE(p.Tensor(dtype, "0", numel, offset, sizes, strides));
  const std::string pickle = p.Finish();
  const std::string data(static_cast<size_t>(numel) * c10::elementSize(dtype), '\x5a');
  std::string out;
  caffe2::serialize::PyTorchStreamWriter zip([&](const void* b, size_t n) {
    out.append(static_cast<const char*>(b), n);
    return n;
  });
  zip.writeRecord("data.pkl", pickle.data(), pickle.size());
  zip.writeRecord("byteorder", "little", 6);
  zip.writeRecord("data/0", data.data(), data.size());
  zip.writeEndOfFile();
  return out;
}

struct Located {
  absl::StatusOr<PayloadTensor> tensor;
};

Located Locate(const std::string& archive) {
  static int n = 0;
  InMemoryStorage storage;
  EXPECT_TRUE(storage.MakeDirectories("/m").ok());
  const std::string path = "/m/p" + std::to_string(n++);
  auto file = File::CreateNew(storage, path);
  EXPECT_TRUE(file.ok());
  EXPECT_TRUE(file->WriteAt(archive.data(), static_cast<int64_t>(archive.size()), 0).ok());
  EXPECT_TRUE(file->Close().ok());
  auto in = File::OpenForRead(storage, path);
  EXPECT_TRUE(in.ok());
  auto payload = TorchSavePayload::Open(*in, 0, static_cast<int64_t>(archive.size()), "f.distcp, key 'w'");
  if (!payload.ok()) return {payload.status()};
  return {payload->Tensor(payload->graph().root(), "its payload")};
}

TEST(TorchSavePayload, RowMajorAndPermutedLayoutsAreLocated) {
  auto row = Locate(Archive(c10::kFloat, 12, 0, {3, 4}, {4, 1}));
  ASSERT_TRUE(row.tensor.ok()) << row.tensor.status();
  EXPECT_TRUE(row.tensor->dim_order.empty());
  EXPECT_EQ(row.tensor->end - row.tensor->begin, 48);
  // w.t(): sizes (4, 3) over a row-major (3, 4) storage.
  auto t = Locate(Archive(c10::kDouble, 12, 0, {4, 3}, {1, 4}));
  ASSERT_TRUE(t.tensor.ok()) << t.tensor.status();
  EXPECT_EQ(t.tensor->dim_order, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(t.tensor->end - t.tensor->begin, 96);
  // channels_last (N, C, H, W) = (2, 3, 4, 5): strides (60, 1, 15, 3).
  auto cl = Locate(Archive(c10::kComplexFloat, 120, 0, {2, 3, 4, 5}, {60, 1, 15, 3}));
  ASSERT_TRUE(cl.tensor.ok()) << cl.tensor.status();
  EXPECT_EQ(cl.tensor->dim_order, (std::vector<int64_t>{0, 2, 3, 1}));
  EXPECT_EQ(cl.tensor->dtype, c10::kComplexFloat);
  // One-element dims carry any stride; with them, a row-major layout is row-major.
  auto ones = Locate(Archive(c10::kFloat, 6, 0, {2, 1, 3}, {3, 99, 1}));
  ASSERT_TRUE(ones.tensor.ok()) << ones.tensor.status();
  EXPECT_TRUE(ones.tensor->dim_order.empty());
  // complex32 through _rebuild_tensor_v3 over an UntypedStorage, offset in its elements.
  auto half = Locate(Archive(c10::ScalarType::ComplexHalf, 8, 2, {2, 3}, {1, 2}));
  ASSERT_TRUE(half.tensor.ok()) << half.tensor.status();
  EXPECT_EQ(half.tensor->dtype, c10::ScalarType::ComplexHalf);
  EXPECT_EQ(half.tensor->dim_order, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(half.tensor->end - half.tensor->begin, 24);
  // Empty tensors: no layout to check.
  auto empty = Locate(Archive(c10::kFloat, 0, 0, {0, 4}, {0, 0}));
  ASSERT_TRUE(empty.tensor.ok()) << empty.tensor.status();
  EXPECT_EQ(empty.tensor->begin, empty.tensor->end);
}

TEST(TorchSavePayload, HostileStridesAreRefusedNamingThem) {
  auto expect = [](const std::string& archive, const std::string& needle) {
    auto got = Locate(archive);
    ASSERT_FALSE(got.tensor.ok()) << needle;
    EXPECT_THAT(std::string(got.tensor.status().message()), HasSubstr("f.distcp, key 'w'")) << needle;
    EXPECT_THAT(std::string(got.tensor.status().message()), HasSubstr(needle));
  };
  expect(Archive(c10::kFloat, 12, 11, {3, 4}, {4, -1}), "negative stride");
  expect(Archive(c10::kFloat, 12, 0, {3, 4}, {0, 1}), "zero stride");
  expect(Archive(c10::kFloat, 12, 0, {3, 4}, {2, 1}), "not a dense layout");   // overlapping rows
  expect(Archive(c10::kFloat, 24, 0, {3, 4}, {8, 1}), "not a dense layout");   // holes between rows
  expect(Archive(c10::kFloat, 12, 1, {3, 4}, {4, 1}), "overrun its storage");  // one past the end
  expect(Archive(c10::kFloat, 12, 0, {3, 4}, {int64_t{1} << 62, int64_t{1} << 61}), "not a dense layout");
  expect(Archive(c10::kFloat, 12, 0, {int64_t{1} << 40, int64_t{1} << 40}, {1, 1}), "overflow");
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint::pytorch
