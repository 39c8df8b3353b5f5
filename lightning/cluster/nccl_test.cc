// The CUDA path: a one-process NCCL group from InitDistributed, and sharded
// tensors placed on "rank:0/cuda:0" created, all-reduced and gathered there.
// Skipped, with the reason, on a CPU-only LibTorch or a machine with no GPU
// (tagged "gpu": run it where one is lent).
#include "gtest/gtest.h"
#include "lightning/cluster/distributed.h"
#include "lightning/cluster/free_port.h"
#include "sharded/collectives.h"
#include "sharded/factories.h"
#include "sharded/process_groups.h"
#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>

namespace shardlight::lightning::cluster {
namespace {

TEST(Nccl, ShardsOnTheGpuThroughAnNcclGroup) {
  if (!sharded::HasNccl()) GTEST_SKIP() << "this LibTorch is not a CUDA build (no USE_C10D_NCCL)";
  if (!at::hasCUDA() || at::detail::getCUDAHooks().getNumGPUs() < 1) GTEST_SKIP() << "no CUDA device here";
  ProcessPlacement p;
  p.launcher = "test";
  p.master_port = FreePort();
  DistributedOptions o;
  o.device = "cuda";
  auto ctx = InitDistributed(p, o);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  EXPECT_EQ((*ctx)->backend(), "nccl");
  auto& pg = (*ctx)->pg();
  std::vector<at::Tensor> t = {at::ones({8}, at::TensorOptions().device("cuda:0"))};
  ASSERT_TRUE(sharded::RunCollective(*pg, "allreduce", [&] { return pg->allreduce(t); }).ok());
  EXPECT_EQ(t[0].sum().item<float>(), 8.0f);
  sharded::ChunkShardingSpec spec;
  spec.dim = 0;
  spec.placements = {*sharded::ParsePlacement("rank:0/cuda:0")};
  auto st = sharded::Randn(spec, {16, 4}, 3, {}, pg);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(st->local_shards()[0].tensor.is_cuda());
  auto full = st->FullTensor();
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE(full->is_cuda());
  EXPECT_EQ((*ctx)->Leave(), absl::OkStatus());
}

}  // namespace
}  // namespace shardlight::lightning::cluster
