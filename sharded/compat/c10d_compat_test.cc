#include "sharded/compat/c10d_compat.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

namespace shardlight::sharded::compat {
namespace {

// The seam's groups work the same on every LibTorch: two thread-ranks over
// one HashStore allreduce and allgather CPU tensors through the ProcessGroup
// front (2.x) or the backend itself (1.x).
TEST(C10dCompatTest, GlooGroupRunsCollectivesOnCpuTensors) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto device = NewGlooDeviceForHostname("127.0.0.1");
  std::vector<at::Tensor> sums(2), gathered(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      auto pg = NewGlooGroup(store, rank, 2, std::chrono::seconds(20), 1, device);
      ASSERT_EQ(pg->getRank(), rank);
      ASSERT_EQ(pg->getSize(), 2);
      EXPECT_EQ(pg->getBackendName(), "gloo");
      std::vector<at::Tensor> t{at::full({3}, rank + 1.0)};
      pg->allreduce(t)->wait();
      sums[rank] = t[0];
      std::vector<std::vector<at::Tensor>> out{{at::empty({1}), at::empty({1})}};
      std::vector<at::Tensor> in{at::full({1}, 10.0 * rank)};
      pg->allgather(out, in)->wait();
      gathered[rank] = at::cat(out[0]);
    });
  }
  for (auto& t : ranks) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(at::equal(sums[rank], at::full({3}, 3.0)));
    EXPECT_TRUE(at::equal(gathered[rank], at::tensor({0.0f, 10.0f})));
  }
}

TEST(C10dCompatTest, VersionAndLayoutAgree) {
  EXPECT_EQ(GroupsDispatchToBackends(), HeaderVersion()[0] >= '2') << HeaderVersion();
}

TEST(C10dCompatTest, NcclWithoutACudaBuildIsAClearError) {
  if (HasNccl()) GTEST_SKIP() << "a CUDA build: NCCL groups need a GPU (tools/gpu_check.sh)";
  auto store = c10::make_intrusive<c10d::HashStore>();
  try {
    NewNcclGroup(store, 0, 1, std::chrono::seconds(1), NewGlooDeviceForHostname("127.0.0.1"), 1);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no NCCL"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace shardlight::sharded::compat
