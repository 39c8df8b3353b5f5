// ReduceScatterSlots: the same sums through c10d's reduce_scatter (where the
// probe finds it) and through allreduce + narrow, with uneven values per rank.
#include "lightning/strategies/reduce_scatter.h"

#include <gtest/gtest.h>

#include <iostream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;

TEST(ReduceScatterTest, ProbeAndBothPathsGiveEachRankItsSlotOfTheSum) {
  for (int w : {1, 2, 3}) {
    SimulatedCluster cluster(w);
    auto results = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<bool> {
      auto probed = ProbeReduceScatter(*ctx.pg);
      if (!probed.ok()) return probed.status();
      for (bool reduce_scatter : {false, *probed}) {
        std::vector<at::Tensor> slots;  // rank r sends (r + 1) * [10 j, 10 j + 1, 10 j + 2] to slot j
        for (int j = 0; j < w; ++j) slots.push_back(at::arange(3, at::kFloat).add(10.0 * j).mul(ctx.rank + 1));
        auto mine = ReduceScatterSlots(*ctx.pg, slots, reduce_scatter, "test");
        if (!mine.ok()) return mine.status();
        const at::Tensor want = at::arange(3, at::kFloat).add(10.0 * ctx.rank).mul(w * (w + 1) / 2.0);
        if (!at::equal(*mine, want)) return absl::InternalError("wrong sums");
      }
      return *probed;
    });
    ASSERT_TRUE(results.ok()) << results.status();
    for (bool probed : *results) EXPECT_EQ(probed, (*results)[0]) << "every rank takes the same path";
    std::cout << "W=" << w << ": c10d reduce_scatter " << ((*results)[0] ? "used" : "not available: allreduce + narrow")
              << "\n";
  }
}

// ReduceScatterFlat: every path the probes allow gives each rank its slot of
// the sum (the flat one where _reduce_scatter_base works, torch 2.x's Gloo).
TEST(ReduceScatterTest, FlatBufferSumsAlikeOnEveryAvailablePath) {
  for (int w : {1, 2, 3}) {
    SimulatedCluster cluster(w);
    auto results = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<bool> {
      auto list = ProbeReduceScatter(*ctx.pg);
      if (!list.ok()) return list.status();
      auto flat = ProbeFlatReduceScatter(*ctx.pg);
      if (!flat.ok()) return flat.status();
      std::vector<ReduceScatterPath> paths = {ReduceScatterPath::kAllreduce};
      if (*list) paths.push_back(ReduceScatterPath::kList);
      if (*flat) paths.push_back(ReduceScatterPath::kFlat);
      for (ReduceScatterPath path : paths) {
        // rank r sends (r + 1) * [10 j, 10 j + 1, 10 j + 2] to slot j, the slots end to end
        const at::Tensor input = at::arange(3 * w, at::kFloat).remainder(3).add(
            at::arange(w, at::kFloat).repeat_interleave(3).mul(10.0)).mul(ctx.rank + 1);
        auto mine = ReduceScatterFlat(*ctx.pg, input.clone(), path, "test");
        if (!mine.ok()) return mine.status();
        const at::Tensor want = at::arange(3, at::kFloat).add(10.0 * ctx.rank).mul(w * (w + 1) / 2.0);
        if (!at::equal(*mine, want)) return absl::InternalError(absl::StrCat("wrong sums on path ", static_cast<int>(path)));
      }
      return *flat;
    });
    ASSERT_TRUE(results.ok()) << results.status();
    for (bool flat : *results) EXPECT_EQ(flat, (*results)[0]) << "every rank takes the same path";
    std::cout << "W=" << w << ": _reduce_scatter_base " << ((*results)[0] ? "used" : "not available") << "\n";
  }
}

// fsdp_tp and fsdp probe the flat path in one dtype and reduce every bucket's
// (a floating dtype: gradients) by the path it picks. That holds while the
// probe answers alike for each floating dtype and the flat path then sums
// each correctly: Gloo's list, flat and allreduce paths share one dtype
// dispatch (1.13: no reduce-scatter at all; 2.x: all of them), as NCCL's do.
TEST(ReduceScatterTest, TheFlatProbeAnswersAlikeForEveryFloatingDtype) {
  for (int w : {2, 3}) {
    SimulatedCluster cluster(w);
    auto results = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<bool> {
      auto in_float = ProbeFlatReduceScatter(*ctx.pg, at::kFloat);
      if (!in_float.ok()) return in_float.status();
      for (c10::ScalarType dtype : {at::kDouble, at::kHalf, at::kBFloat16}) {
        auto probed = ProbeFlatReduceScatter(*ctx.pg, dtype);
        if (!probed.ok()) return probed.status();
        if (*probed != *in_float) {
          return absl::InternalError(absl::StrCat("the flat probe says ", *probed, " in ", c10::toString(dtype),
                                                  " but ", *in_float, " in float"));
        }
        if (!*probed) continue;
        // rank r sends (r + 1) * [10 j, 10 j + 1, 10 j + 2] to slot j, the slots end to end (exact in every dtype)
        const at::Tensor input = at::arange(3 * w, at::kFloat).remainder(3).add(
            at::arange(w, at::kFloat).repeat_interleave(3).mul(10.0)).mul(ctx.rank + 1).to(dtype);
        auto mine = ReduceScatterFlat(*ctx.pg, input.clone(), ReduceScatterPath::kFlat, "test");
        if (!mine.ok()) return mine.status();
        const at::Tensor want = at::arange(3, at::kFloat).add(10.0 * ctx.rank).mul(w * (w + 1) / 2.0).to(dtype);
        if (mine->scalar_type() != dtype || !at::equal(*mine, want)) {
          return absl::InternalError(absl::StrCat("wrong flat sums in ", c10::toString(dtype)));
        }
      }
      return *in_float;
    });
    ASSERT_TRUE(results.ok()) << "W=" << w << ": " << results.status();
  }
}

}  // namespace
}  // namespace shardlight::lightning
