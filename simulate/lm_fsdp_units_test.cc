// The LM under per-unit FSDP (LmJobOptions::fsdp_per_unit, the default under
// --strategy=fsdp): GptModel runs each block through RunFsdpUnit, so a rank
// gathers one block at a time. On thread-ranks, a tiny GPT whose dim-0 sizes
// leave some rank an EMPTY chunk (dim 6 on 4 ranks: 2, 2, 2, 0; MLP 4 on 3
// ranks: 2, 2, 0) and a global batch of 6 (at W=4 one rank has no data):
//  - per-unit fsdp trains bit-equal to whole-model fsdp (float64 at W =
//    1..4, float32 at W = 3, 4) and within 1e-12 (float64) / 1e-6 (float32)
//    of ddp;
//  - inside a block's forward a rank holds at most the root and two blocks
//    unsharded (FsdpOptions::on_unit_forward), not the whole model;
//  - a checkpoint saved under per-unit fsdp resumes under ddp on another
//    world size with the uninterrupted run's losses;
//  - HSDP (--strategy=hsdp on a replicate x shard mesh) trains as fsdp on
//    the same world, and its checkpoint (the save at save_at) resumes under
//    fsdp on another world size;
//  - a bf16 / fp32 mixed-precision policy holds the blocks in bf16 and
//    learns as float32 does; refused under the other strategies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "simulate/core/simulated_cluster.h"
#include "simulate/lm_run.h"
#include "simulate/training_run.h"

namespace shardlight::simulate {
namespace {

constexpr int64_t kDim = 6, kMlp = 4, kContext = 8, kLayers = 4, kVocab = 256;

LmJobOptions Tiny(at::ScalarType dtype) {
  LmJobOptions job;
  job.model.dim = kDim;
  job.model.heads = 2;
  job.model.mlp_hidden = kMlp;
  job.model.layers = kLayers;
  job.model.context = kContext;
  job.model.dtype = dtype;
  job.batch = 6;
  job.steps = 3;
  job.eval_batches = 1;
  return job;
}

struct LmRuns {
  std::vector<LmRankResult> ranks;
  // Per rank: (unit, unsharded parameter bytes) at each unit's entry.
  std::vector<std::vector<std::pair<std::string, int64_t>>> entries;
};

// `job` on W thread-ranks under `strategy` (on `mesh`, Wx1 when empty);
// every rank must succeed.
LmRuns RunLm(LmJobOptions job, int64_t w, const std::string& strategy, bool per_unit = true,
             std::vector<int64_t> mesh = {}) {
  job.mesh_shape = mesh.empty() ? std::vector<int64_t>{w, 1} : mesh;
  job.strategy = strategy;
  job.fsdp_per_unit = per_unit;
  SimulatedCluster cluster(static_cast<int>(w));
  LmRuns run;
  run.entries.resize(w);
  auto results = cluster.Run([&](RankContext& ctx) {
    LmJobOptions mine = job;
    auto& entries = run.entries[ctx.rank];
    mine.fsdp_on_unit_forward = [&entries](const std::string& unit, int64_t bytes) {
      entries.emplace_back(unit, bytes);
    };
    sharded::mesh::MeshContext mesh;
    mesh.store = ctx.store;
    mesh.rank = ctx.rank;
    mesh.world_size = ctx.world_size;
    mesh.world = ctx.pg;
    return RunLmRank(mine, mesh);
  });
  EXPECT_TRUE(results.ok()) << strategy << " W=" << w << ": " << results.status();
  if (results.ok()) run.ranks = *std::move(results);
  return run;
}

double LargestRelative(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]) / std::abs(want[i]));
  return worst;
}

// Elements of the root (token embedding, positions, final norm, head) and
// of one block (two norms, q, k, v, attention projection, MLP fc and proj).
constexpr int64_t kRootNumel = kVocab * kDim + kContext * kDim + 2 * kDim + kVocab * kDim;
constexpr int64_t kBlockNumel = 2 * 2 * kDim + 4 * (kDim * kDim + kDim) + (kMlp * kDim + kMlp) + (kDim * kMlp + kDim);

TEST(LmFsdpUnitsTest, PerUnitTrainsBitEqualToWholeModelFsdpAndAsDdp) {
  for (const at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    const LmJobOptions job = Tiny(dtype);
    // fp32 at W = 3 and 4 only (the uneven and empty chunks). ddp may sum
    // in another order (fp64 1e-12, fp32 1e-6; measured: 0).
    const std::vector<int64_t> worlds = dtype == at::kDouble ? std::vector<int64_t>{1, 2, 3, 4}
                                                             : std::vector<int64_t>{3, 4};
    for (const int64_t w : worlds) {
      const std::string what = absl::StrCat(c10::toString(dtype), " W=", w);
      const LmRuns ddp = RunLm(job, w, "ddp");
      const LmRuns whole = RunLm(job, w, "fsdp", /*per_unit=*/false);
      const LmRuns unit = RunLm(job, w, "fsdp");
      ASSERT_EQ(ddp.ranks.size(), static_cast<size_t>(w)) << what;
      ASSERT_EQ(whole.ranks.size(), static_cast<size_t>(w)) << what;
      ASSERT_EQ(unit.ranks.size(), static_cast<size_t>(w)) << what;
      for (int64_t r = 0; r < w; ++r) {
        // The same collectives' sums in the same order: the same bits.
        EXPECT_EQ(unit.ranks[r].losses, whole.ranks[r].losses) << what << " rank " << r;
        EXPECT_EQ(unit.ranks[r].eval_perplexity, whole.ranks[r].eval_perplexity) << what << " rank " << r;
        EXPECT_EQ(unit.ranks[r].state_bytes, whole.ranks[r].state_bytes) << what << " rank " << r;
        // Whole-model fsdp gathers nothing per unit.
        EXPECT_TRUE(whole.entries[r].empty()) << what << " rank " << r;
      }
      const double vs_ddp = LargestRelative(unit.ranks[0].losses, ddp.ranks[0].losses);
      EXPECT_LT(vs_ddp, dtype == at::kDouble ? 1e-12 : 1e-6) << what;
      std::cout << what << ": per-unit fsdp losses equal whole-model fsdp's bit for bit; largest relative "
                << "difference from ddp " << vs_ddp << "\n";
      EXPECT_LT(unit.ranks[0].losses.back(), unit.ranks[0].losses.front()) << what;  // it learns
    }
  }
}

// Each rank enters block0..block3 once per step, in order, and on entering
// one holds at most the root and two blocks unsharded (the block it
// computes, and the next one's prefetch) -- at W=4 a fraction of the whole
// model, which whole-model fsdp (and ddp) hold for the whole step.
TEST(LmFsdpUnitsTest, PerUnitHoldsAtMostTheRootAndTwoBlocksUnsharded) {
  const LmJobOptions job = Tiny(at::kDouble);
  const int64_t element = 8;
  const int64_t root = kRootNumel * element, block = kBlockNumel * element;
  const int64_t whole = root + kLayers * block;
  for (const int64_t w : {1, 2, 3, 4}) {
    const LmRuns unit = RunLm(job, w, "fsdp");
    ASSERT_EQ(unit.ranks.size(), static_cast<size_t>(w));
    for (int64_t r = 0; r < w; ++r) {
      const auto& entries = unit.entries[r];
      ASSERT_EQ(entries.size(), static_cast<size_t>(job.steps * kLayers)) << "W=" << w << " rank " << r;
      int64_t peak = 0;
      for (size_t i = 0; i < entries.size(); ++i) {
        EXPECT_EQ(entries[i].first, absl::StrCat("block", i % kLayers)) << "W=" << w << " rank " << r << " entry " << i;
        EXPECT_GE(entries[i].second, root + block) << "W=" << w << " rank " << r << " entry " << i;
        peak = std::max(peak, entries[i].second);
      }
      EXPECT_LE(peak, root + 2 * block) << "W=" << w << " rank " << r;
      EXPECT_LT(peak, whole) << "W=" << w << " rank " << r;
      if (w == 4) {
        std::cout << "W=4 rank " << r << ": peak unsharded parameter bytes in a block's forward " << peak
                  << " (root " << root << " + " << static_cast<double>(peak - root) / static_cast<double>(block)
                  << " blocks of " << block << ") vs the whole model's " << whole << " ("
                  << static_cast<double>(peak) / static_cast<double>(whole) << "x)\n";
      }
    }
  }
}

// A checkpoint saved after step 2 by per-unit fsdp on 3 ranks (empty MLP
// chunks) resumes under ddp on 2 ranks and under per-unit fsdp on 4, each
// continuing with the uninterrupted ddp run's losses (float64, 1e-12).
TEST(LmFsdpUnitsTest, PerUnitCheckpointResumesUnderDdpOnAnotherWorldSize) {
  TempDir dir;
  LmJobOptions job = Tiny(at::kDouble);
  job.steps = 4;
  const LmRuns full = RunLm(job, 1, "ddp");
  ASSERT_EQ(full.ranks.size(), 1u);
  job.checkpoint_dir = dir.path();
  job.steps = 2;
  ASSERT_EQ(RunLm(job, 3, "fsdp").ranks.size(), 3u);
  job.steps = 4;
  job.save_at = 0;  // the resumed runs save nothing: each resumes step 2
  for (const auto& [w, strategy] : std::vector<std::pair<int64_t, std::string>>{{2, "ddp"}, {4, "fsdp"}}) {
    const LmRuns resumed = RunLm(job, w, strategy);
    ASSERT_EQ(resumed.ranks.size(), static_cast<size_t>(w)) << strategy;
    EXPECT_EQ(resumed.ranks[0].start_step, 2) << strategy;
    ASSERT_EQ(resumed.ranks[0].losses.size(), 2u) << strategy;
    const std::vector<double> want(full.ranks[0].losses.begin() + 2, full.ranks[0].losses.end());
    EXPECT_LT(LargestRelative(resumed.ranks[0].losses, want), 1e-12) << strategy << " W=" << w;
  }
}

// HSDP on 2x2 and 2x3 (shard groups of 3: MLP 4 -> 2, 2, 0) trains within
// 1e-12 (float64) of fsdp on 4 and 6 ranks; the checkpoint its save_at
// writes (each replicated shard once) resumes under fsdp on 3 ranks with
// fsdp's losses.
TEST(LmFsdpUnitsTest, HsdpTrainsAsFsdpAndItsCheckpointResumesUnderFsdp) {
  LmJobOptions job = Tiny(at::kDouble);
  job.steps = 3;
  for (const std::vector<int64_t>& mesh : {std::vector<int64_t>{2, 2}, std::vector<int64_t>{2, 3}}) {
    const int64_t w = mesh[0] * mesh[1];
    const LmRuns fsdp = RunLm(job, w, "fsdp");
    const LmRuns hsdp = RunLm(job, w, "hsdp", true, mesh);
    ASSERT_EQ(hsdp.ranks.size(), static_cast<size_t>(w));
    ASSERT_EQ(fsdp.ranks.size(), static_cast<size_t>(w));
    const double worst = LargestRelative(hsdp.ranks[0].losses, fsdp.ranks[0].losses);
    std::cout << "hsdp " << mesh[0] << "x" << mesh[1] << " vs fsdp W=" << w << ": largest relative loss difference "
              << worst << "\n";
    EXPECT_LE(worst, 1e-12);
  }
  TempDir dir;
  const LmRuns straight = RunLm(job, 4, "fsdp");
  job.checkpoint_dir = dir.path();
  job.save_at = 1;  // LmCallback's save, after step 1
  ASSERT_EQ(RunLm(job, 4, "hsdp", true, {2, 2}).ranks.size(), 4u);
  const LmRuns resumed = RunLm(job, 3, "fsdp");  // resumed at step 1: saves nothing
  ASSERT_EQ(resumed.ranks.size(), 3u);
  EXPECT_EQ(resumed.ranks[0].start_step, 1);
  const std::vector<double> want(straight.ranks[0].losses.begin() + 1, straight.ranks[0].losses.end());
  EXPECT_LT(LargestRelative(resumed.ranks[0].losses, want), 1e-12);
}

// --param_dtype=bf16 --reduce_dtype=fp32 on the LM (W = 3: empty MLP
// chunks): each block is held in bfloat16 (half the float32 run's bytes on
// entering it), the job learns what float32 learns to bf16's precision, and
// the policy is refused under any other strategy, naming it.
TEST(LmFsdpUnitsTest, MixedPrecisionHoldsBlocksInBf16) {
  LmJobOptions job = Tiny(at::kFloat);
  const LmRuns fp32 = RunLm(job, 3, "fsdp");
  job.param_dtype = "bf16";
  job.reduce_dtype = "fp32";
  const LmRuns bf16 = RunLm(job, 3, "fsdp");
  ASSERT_EQ(fp32.ranks.size(), 3u);
  ASSERT_EQ(bf16.ranks.size(), 3u);
  for (int64_t r = 0; r < 3; ++r) {
    ASSERT_EQ(bf16.entries[r].size(), fp32.entries[r].size()) << "rank " << r;
    for (size_t i = 0; i < bf16.entries[r].size(); ++i) {
      EXPECT_EQ(2 * bf16.entries[r][i].second, fp32.entries[r][i].second) << "rank " << r << " entry " << i;
    }
    // The master shards and AdamW moments stay float32.
    EXPECT_EQ(bf16.ranks[r].state_bytes, fp32.ranks[r].state_bytes) << "rank " << r;
  }
  // A fresh model's loss is ~ln 256 = 5.5; bf16 rounds it at 2^-9 relative
  // per operation: 3 steps stay within 1% of float32's, and differ from them.
  const double worst = LargestRelative(bf16.ranks[0].losses, fp32.ranks[0].losses);
  EXPECT_LT(worst, 1e-2);
  EXPECT_GT(worst, 0);
  std::cout << "W=3 bf16/fp32 policy vs float32: largest relative loss difference " << worst << "\n";
  EXPECT_EQ(CheckLmMixedPrecision("ddp", "bf16", "").message(),
            "param_dtype (fsdp's mixed-precision policy) applies to the fsdp and hsdp strategies only, not ddp");
  EXPECT_EQ(CheckLmMixedPrecision("model_parallel", "", "fp32").message(),
            "reduce_dtype (fsdp's mixed-precision policy) applies to the fsdp and hsdp strategies only, not "
            "model_parallel");
  EXPECT_NE(CheckLmMixedPrecision("fsdp", "int8", "").message().find("param_dtype: 'int8' is not a floating dtype"),
            std::string::npos);
  EXPECT_TRUE(CheckLmMixedPrecision("fsdp", "bfloat16", "float32").ok());
}
}  // namespace
}  // namespace shardlight::simulate
