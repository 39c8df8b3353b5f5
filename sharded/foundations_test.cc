// The single mechanisms every package builds on: exceptions as statuses,
// the stable hash, the box, the byte view the byte collectives take.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <c10/util/Exception.h>

#include <new>
#include <stdexcept>

#include "absl/status/statusor.h"
#include "sharded/box.h"
#include "sharded/collectives.h"
#include "sharded/no_throw.h"
#include "sharded/stable_hash.h"

namespace shardlight::sharded {
namespace {

// A c10d work may hold only the byte view of a buffer whose tensor its
// caller has already dropped (a failed step): the view must keep the bytes.
TEST(ByteViewTest, ViewsTheBytesAndHoldsTheTensor) {
  at::Tensor t = at::arange(4, at::kInt);
  const void* data = t.data_ptr();
  const auto storage = t.storage().getWeakStorageImpl();
  at::Tensor v = ByteView(t);
  EXPECT_EQ(v.scalar_type(), at::kByte);
  EXPECT_EQ(v.numel(), 16);
  EXPECT_EQ(v.data_ptr(), data);
  t = at::Tensor();
  EXPECT_FALSE(storage.expired()) << "the view let go of the tensor's storage";
  EXPECT_EQ(v[4].item<int>(), 1);  // int 1, little-endian, at byte 4
  v = at::Tensor();
  EXPECT_TRUE(storage.expired());
}

TEST(NoThrowTest, ExceptionsBecomeStatusesWithoutBacktraces) {
  absl::Status torch = NoThrow([]() -> absl::Status {
    TORCH_CHECK(false, "boom");
    return absl::OkStatus();
  });
  EXPECT_EQ(torch.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(torch.message(), "LibTorch error: boom");
  absl::StatusOr<int> other = NoThrow([]() -> absl::StatusOr<int> { throw std::runtime_error("bad"); });
  EXPECT_EQ(other.status().message(), "exception: bad");
  absl::Status oom = NoThrow([]() -> absl::Status { throw std::bad_alloc(); });
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(NoThrow([]() -> absl::Status { throw 3; }).message(), "exception of an unknown type");
  EXPECT_EQ(*NoThrow([] { return absl::StatusOr<int>(7); }), 7);
}

TEST(StableHashTest, FixedValuesAndPartsAreSeparated) {
  // FNV-1a of the bytes, then the 0xff separator: fixed values in every build.
  EXPECT_EQ(StableHash(""), 0xaf64724c8602eb6eULL);
  EXPECT_EQ(StableHash("abc"), 0xfc182483ee0806dcULL);
  EXPECT_NE(StableHash("abc"), StableHash("abd"));
  EXPECT_NE(StableHash("c", StableHash("ab")), StableHash("bc", StableHash("a")));
  EXPECT_EQ(StableHash("b", StableHash("a")), StableHash("b", StableHash("a")));
}

TEST(BoxTest, IntersectionAndVolume) {
  const Box a{{0, 2}, {4, 4}};
  const Box b{{2, 0}, {4, 3}};
  EXPECT_EQ(a.NumElements(), 16);
  EXPECT_EQ(Intersect(a, b), (Box{{2, 2}, {2, 1}}));
  EXPECT_EQ(Intersect(a, Box{{4, 0}, {1, 9}}), std::nullopt) << "touching is not overlapping";
  EXPECT_EQ(Intersect(Box{}, Box{}), Box{}) << "0-d boxes share their one element";
  EXPECT_EQ(Box{}.NumElements(), 1);
  EXPECT_EQ(Box::Whole({3, 5}), (Box{{0, 0}, {3, 5}}));
  EXPECT_EQ((Box{{1}, {0}}).NumElements(), 0);
}

}  // namespace
}  // namespace shardlight::sharded
