// The CUDA path: a one-process NCCL group from InitDistributed, and sharded
// tensors placed on "rank:0/cuda:0" created, all-reduced and gathered there,
// allgathered through NCCL, gathered and resharded, and checkpointed from
// CUDA shards and loaded back onto them. Skipped, with the reason, on a
// CPU-only LibTorch or a machine with no GPU (tagged "gpu":
// tools/gpu_check.sh runs it where one is lent).
#include "gtest/gtest.h"
#include "lightning/cluster/distributed.h"
#include "lightning/cluster/free_port.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/collectives.h"
#include "sharded/factories.h"
#include "sharded/process_groups.h"
#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>

namespace shardlight::lightning::cluster {
namespace {

// Why this machine cannot run the CUDA path, or "" when it can.
std::string WhyNoGpu() {
  if (!sharded::HasNccl()) return "this LibTorch is not a CUDA build (no USE_C10D_NCCL)";
  if (!at::hasCUDA() || at::detail::getCUDAHooks().getNumGPUs() < 1) {
    return "a CUDA LibTorch, but no CUDA device here (tools/gpu_check.sh on a GPU machine)";
  }
  return "";
}

absl::StatusOr<std::unique_ptr<DistributedContext>> OneGpuJob() {
  ProcessPlacement p;
  p.launcher = "test";
  p.master_port = FreePort();
  DistributedOptions o;
  o.device = "cuda";
  return InitDistributed(p, o);
}

TEST(Nccl, ShardsOnTheGpuThroughAnNcclGroup) {
  if (std::string why = WhyNoGpu(); !why.empty()) GTEST_SKIP() << why;
  auto ctx = OneGpuJob();
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

TEST(Nccl, AllgatherOnTheGpu) {
  if (std::string why = WhyNoGpu(); !why.empty()) GTEST_SKIP() << why;
  auto ctx = OneGpuJob();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto& pg = (*ctx)->pg();
  auto cuda = at::TensorOptions().device("cuda:0");
  std::vector<at::Tensor> in = {at::arange(6, cuda.dtype(at::kFloat))};
  std::vector<std::vector<at::Tensor>> out = {{at::empty({6}, cuda.dtype(at::kFloat))}};
  ASSERT_TRUE(sharded::RunCollective(*pg, "allgather", [&] { return pg->allgather(out, in); }).ok());
  EXPECT_TRUE(out[0][0].is_cuda());
  EXPECT_TRUE(at::equal(out[0][0].cpu(), at::arange(6, at::kFloat)));
  EXPECT_EQ((*ctx)->Leave(), absl::OkStatus());
}

// Gather and Reshard move boxes through BoxExchange's all-to-all: over NCCL
// the buffers are CUDA tensors, and the results stay on the GPU.
TEST(Nccl, GatherAndReshardOnTheGpu) {
  if (std::string why = WhyNoGpu(); !why.empty()) GTEST_SKIP() << why;
  auto ctx = OneGpuJob();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto& pg = (*ctx)->pg();
  sharded::ChunkShardingSpec rows;
  rows.dim = 0;
  rows.placements = {*sharded::ParsePlacement("rank:0/cuda:0")};
  auto st = sharded::Randn(rows, {12, 5}, 7, {}, pg);
  ASSERT_TRUE(st.ok()) << st.status();
  auto want = st->FullTensor();
  ASSERT_TRUE(want.ok()) << want.status();
  auto gathered = st->Gather(0);
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  ASSERT_TRUE(gathered->has_value());
  EXPECT_TRUE((*gathered)->is_cuda());
  EXPECT_TRUE(at::equal((*gathered)->cpu(), want->cpu()));
  sharded::ChunkShardingSpec cols = rows;
  cols.dim = 1;
  auto resharded = st->Reshard(cols);
  ASSERT_TRUE(resharded.ok()) << resharded.status();
  ASSERT_EQ(resharded->local_shards().size(), 1u);
  EXPECT_TRUE(resharded->local_shards()[0].tensor.is_cuda());
  auto again = resharded->FullTensor();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(at::equal(again->cpu(), want->cpu()));
  EXPECT_EQ((*ctx)->Leave(), absl::OkStatus());
}

// Saved from CUDA shards (the bytes go through host memory), loaded into
// fresh CUDA shards: bit-exact.
TEST(Nccl, CheckpointRoundTripFromCudaShards) {
  if (std::string why = WhyNoGpu(); !why.empty()) GTEST_SKIP() << why;
  auto ctx = OneGpuJob();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto& pg = (*ctx)->pg();
  sharded::ChunkShardingSpec spec;
  spec.dim = 0;
  spec.placements = {*sharded::ParsePlacement("rank:0/cuda:0")};
  auto st = sharded::Randn(spec, {64, 8}, 5, {}, pg);
  ASSERT_TRUE(st.ok()) << st.status();
  sharded::StateDict saved;
  ASSERT_TRUE(saved.Insert("table", *st).ok());
  ASSERT_TRUE(saved.Insert("bias", at::linspace(0, 1, 8, at::TensorOptions().device("cuda:0"))).ok());
  std::string dir = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/nccl_ckpt";
  ASSERT_EQ(sharded::checkpoint::SaveCheckpoint(saved, dir, *pg), absl::OkStatus());

  auto empty = sharded::Zeros(spec, {64, 8}, {}, pg);
  ASSERT_TRUE(empty.ok()) << empty.status();
  sharded::StateDict loaded;
  ASSERT_TRUE(loaded.Insert("table", *empty).ok());
  ASSERT_TRUE(loaded.Insert("bias", at::zeros({8}, at::TensorOptions().device("cuda:0"))).ok());
  ASSERT_EQ(sharded::checkpoint::LoadCheckpoint(loaded, dir, *pg), absl::OkStatus());
  auto want = st->FullTensor();
  auto got = empty->FullTensor();
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_TRUE(got->is_cuda());
  EXPECT_TRUE(at::equal(want->cpu(), got->cpu()));
  EXPECT_EQ((*ctx)->Leave(), absl::OkStatus());
}

}  // namespace
}  // namespace shardlight::lightning::cluster
