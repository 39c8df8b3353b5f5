// async_checkpoint_bench: what an asynchronous checkpoint costs training,
// against a synchronous save of the same state measured in the same run.
//
//   bazel run -c opt //tools/bench:async_checkpoint_bench -- [--gib=0.5] [--budget_mib=256,64] [--dir=/var/tmp/x]
//
// W = 4 thread-ranks hold --gib GiB of float32 state, chunked on dim 0. A
// "training step" is what an optimizer step does to memory and the network:
// every element updated in place, plus a gradient allreduce (--grad_mib) on
// the training group. For each staging budget it prints:
//   - stall per checkpoint (the time Save blocks a rank, worst rank) / the
//     synchronous save time (SaveCheckpoint of the same state), the first
//     save apart from the later ones (Reserve makes the staging memory
//     resident during the --steps_between steps before it, as the Trainer
//     does; whatever is not resident by then the first save faults in);
//   - the time of the steps that overlap a background save / a normal step;
//   - peak extra host memory during the async saves (process VmHWM while a
//     save runs, over the RSS before the first one) / the staging budget of
//     all W ranks.
// After every save the checkpoint is loaded back and checked against the
// values of its step, although training changed them in place meanwhile.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sharded/checkpoint/async/async_checkpointer.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/factories.h"
#include "sharded/sharded_tensor.h"
#include "sharded/sharding_spec.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"
#include "tools/bench/bench_phases.h"
#include "flags/strict_flags.h"

ABSL_FLAG(double, gib, 0.5, "GiB of sharded float32 state (0.001 .. 16)");
ABSL_FLAG(int, world_size, 4, "thread-ranks (1 .. 16)");
ABSL_FLAG(std::vector<std::string>, budget_mib, std::vector<std::string>({"256", "64"}),
          "staging budgets per rank in MiB to measure, each >= 1");
ABSL_FLAG(int, checkpoints, 4, "async checkpoints per budget (1 .. 100)");
ABSL_FLAG(int, steps_between, 8, "training steps between two checkpoints (1 .. 1000)");
ABSL_FLAG(double, grad_mib, 8, "gradient allreduce per step in MiB (0 .. 1024)");
ABSL_FLAG(std::string, dir, "/var/tmp/shardlight_async_checkpoint_bench",
          "working directory, on the file system to measure (/tmp may be tmpfs); replaced");
ABSL_FLAG(int, repeats, 2, "times the synchronous save runs; the best is the baseline");

namespace {

namespace ckpt = shardlight::sharded::checkpoint;
namespace bench = shardlight::tools::bench;
using shardlight::sharded::ChunkShardingSpec;
using shardlight::sharded::ShardedTensor;
using shardlight::sharded::StateDict;
using shardlight::simulate::RankContext;
using shardlight::simulate::SimulatedCluster;
using Clock = std::chrono::steady_clock;

constexpr double kMiB = 1024.0 * 1024.0;
constexpr int kTensors = 4;
constexpr int64_t kCols = 4096;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// Every element of tensor t at step s is (t + 1) * 1000 + s: exact in float32.
absl::StatusOr<StateDict> MakeState(int64_t rows, const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  StateDict state;
  for (int t = 0; t < kTensors; ++t) {
    SL_ASSIGN_OR_RETURN(ShardedTensor st, shardlight::sharded::Full(ChunkShardingSpec::OnRanks(0, pg->getSize()),
                                                                     {rows, kCols}, (t + 1) * 1000.0,
                                                                     {c10::ScalarType::Float, false}, pg));
    SL_RETURN_IF_ERROR(state.Insert(absl::StrCat("layer", t, ".weight"), std::move(st)));
  }
  return state;
}

// One training step: the optimizer's in-place update and a gradient allreduce.
void Step(StateDict& state, at::Tensor& grads, c10d::ProcessGroup& pg) {
  for (auto& [key, value] : state.entries()) {
    for (auto& shard : std::get<ShardedTensor>(value).local_shards()) shard.tensor.add_(1.0);
  }
  std::vector<at::Tensor> t = {grads};
  if (grads.numel() > 0) pg.allreduce(t)->wait();
}

// The checkpoint holds step `step`'s values.
absl::Status CheckLoaded(RankContext& ctx, int64_t rows, const std::string& dir, int64_t step) {
  SL_ASSIGN_OR_RETURN(StateDict loaded, MakeState(rows, ctx.pg));
  SL_RETURN_IF_ERROR(ckpt::LoadCheckpoint(loaded, dir, *ctx.pg));
  for (int t = 0; t < kTensors; ++t) {
    const auto& st = std::get<ShardedTensor>(*loaded.Find(absl::StrCat("layer", t, ".weight")));
    for (const auto& shard : st.local_shards()) {
      if (shard.tensor.numel() > 0 && !at::all(shard.tensor == (t + 1) * 1000.0 + step).item<bool>()) {
        return absl::InternalError(absl::StrCat("the checkpoint of step ", step, " does not hold its values"));
      }
    }
  }
  return absl::OkStatus();
}

double Max(c10d::ProcessGroup& pg, double v) {
  std::vector<at::Tensor> t = {at::full({1}, v, at::kDouble)};
  pg.allreduce(t, {c10d::ReduceOp::MAX})->wait();
  return t[0].item<double>();
}

struct AsyncFigures {
  std::vector<double> stalls;  // worst rank, per checkpoint
  double overlapped_step = 0;  // mean, rank 0
  int overlapped_steps = 0;
  int64_t peak_extra = 0;      // process, over the async phase
  int64_t staging = 0;         // every rank's staging at the end
};

absl::Status RunAsync(RankContext& ctx, int64_t rows, int64_t budget, const std::string& dir, StateDict& state,
                      at::Tensor& grads, int64_t* step, AsyncFigures* out) {
  ckpt::AsyncCheckpointOptions options;
  options.staging_budget_bytes = budget;
  SL_ASSIGN_OR_RETURN(auto group, ctx.groups->Make("async_checkpoint"));
  SL_ASSIGN_OR_RETURN(auto checkpointer, ckpt::AsyncCheckpointer::Create(dir, group, options));
  ctx.pg->barrier()->wait();
  int64_t rss_before = 0;
  if (ctx.rank == 0) {
    bench::ResetPeak();
    rss_before = bench::ProcStatus("VmRSS");
  }
  ctx.pg->barrier()->wait();
  // As the Trainer does: staging made resident in the background while the
  // steps before the first checkpoint run.
  checkpointer->Reserve(state);
  for (int s = 0; s < absl::GetFlag(FLAGS_steps_between); ++s) Step(state, grads, *ctx.pg), ++*step;
  double overlapped = 0;
  int64_t peak = 0;
  for (int c = 0; c < absl::GetFlag(FLAGS_checkpoints); ++c) {
    const int64_t saved_step = *step;
    ctx.pg->barrier()->wait();
    if (ctx.rank == 0) bench::ResetPeak();  // to the RSS now: the load check below is not counted
    ctx.pg->barrier()->wait();
    const auto start = Clock::now();
    SL_ASSIGN_OR_RETURN(auto handle, checkpointer->Save(state, saved_step));
    out->stalls.push_back(Max(*ctx.pg, Seconds(start)));
    for (int s = 0; s < absl::GetFlag(FLAGS_steps_between); ++s) {
      const bool in_flight = !handle->Done();
      const auto step_start = Clock::now();
      Step(state, grads, *ctx.pg);
      ++*step;
      if (in_flight) {
        overlapped += Seconds(step_start);
        ++out->overlapped_steps;
      }
    }
    SL_RETURN_IF_ERROR(handle->Wait());
    ctx.pg->barrier()->wait();
    if (ctx.rank == 0) peak = std::max(peak, bench::ProcStatus("VmHWM"));
    ctx.pg->barrier()->wait();
    SL_RETURN_IF_ERROR(CheckLoaded(ctx, rows, dir, saved_step));
  }
  if (ctx.rank == 0) {
    out->peak_extra = peak - rss_before;
    out->overlapped_step = out->overlapped_steps > 0 ? overlapped / out->overlapped_steps : 0;
  }
  std::vector<at::Tensor> staging = {at::full({1}, static_cast<double>(checkpointer->staging_bytes()), at::kDouble)};
  ctx.pg->allreduce(staging)->wait();
  out->staging = static_cast<int64_t>(staging[0].item<double>());
  return absl::OkStatus();
}

int Run() {
  const double gib = absl::GetFlag(FLAGS_gib);
  const int world = absl::GetFlag(FLAGS_world_size);
  if (!(gib >= 0.001 && gib <= 16) || world < 1 || world > 16 || absl::GetFlag(FLAGS_checkpoints) < 1 ||
      absl::GetFlag(FLAGS_checkpoints) > 100 || absl::GetFlag(FLAGS_steps_between) < 1 ||
      absl::GetFlag(FLAGS_steps_between) > 1000 || !(absl::GetFlag(FLAGS_grad_mib) >= 0) ||
      absl::GetFlag(FLAGS_grad_mib) > 1024) {
    std::cerr << "a flag is out of range; see --help\n";
    return 2;
  }
  std::vector<int64_t> budgets;
  for (const std::string& b : absl::GetFlag(FLAGS_budget_mib)) {
    int mib = 0;
    if (!absl::SimpleAtoi(b, &mib) || mib < 1) {
      std::cerr << "--budget_mib: '" << b << "' is not a whole number of MiB >= 1\n";
      return 2;
    }
    budgets.push_back(int64_t{mib} << 20);
  }
  const int64_t rows = std::max<int64_t>(world, static_cast<int64_t>(gib * 1024 * kMiB / (kTensors * kCols * 4)));
  const double state_bytes = static_cast<double>(rows) * kCols * 4 * kTensors;
  const std::string root = absl::GetFlag(FLAGS_dir);
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);

  SimulatedCluster cluster(world);
  absl::Status status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    SL_ASSIGN_OR_RETURN(StateDict state, MakeState(rows, ctx.pg));
    at::Tensor grads = at::zeros({static_cast<int64_t>(absl::GetFlag(FLAGS_grad_mib) * kMiB / 4)});
    int64_t step = 0;
    // Baselines: a normal step, a synchronous save.
    for (int s = 0; s < 2; ++s) Step(state, grads, *ctx.pg), ++step;  // warm up
    ctx.pg->barrier()->wait();
    const int normal_steps = absl::GetFlag(FLAGS_steps_between);
    auto start = Clock::now();
    for (int s = 0; s < normal_steps; ++s) Step(state, grads, *ctx.pg), ++step;
    const double normal_step = Max(*ctx.pg, Seconds(start)) / normal_steps;
    double sync_save = 1e30;
    for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
      ctx.pg->barrier()->wait();
      start = Clock::now();
      SL_RETURN_IF_ERROR(ckpt::SaveCheckpoint(state, root + "/sync", *ctx.pg));
      sync_save = std::min(sync_save, Max(*ctx.pg, Seconds(start)));
    }
    if (ctx.rank == 0) {
      std::cout << absl::StrFormat(
          "state %.3f GiB on W=%d thread-ranks (%.1f MiB per rank), %d checkpoints x %d steps per budget\n"
          "normal step           %8.1f ms\nsynchronous save      %8.1f ms  (%.0f MiB/s)\n",
          state_bytes / (1024 * kMiB), world, state_bytes / world / kMiB, absl::GetFlag(FLAGS_checkpoints),
          absl::GetFlag(FLAGS_steps_between), normal_step * 1e3, sync_save * 1e3, state_bytes / kMiB / sync_save);
    }
    for (const int64_t budget : budgets) {
      AsyncFigures f;
      SL_RETURN_IF_ERROR(RunAsync(ctx, rows, budget, absl::StrCat(root, "/async-", budget >> 20), state, grads, &step, &f));
      if (ctx.rank != 0) continue;
      // The first save allocates the staging area (first-touch page faults);
      // the later ones reuse it: reported apart.
      const double first = f.stalls.front();
      const double warm = f.stalls.size() > 1
                              ? std::accumulate(f.stalls.begin() + 1, f.stalls.end(), 0.0) / (f.stalls.size() - 1)
                              : first;
      std::cout << absl::StrFormat(
          "budget %4d MiB/rank (%s the %.1f MiB rank state):\n"
          "  stall per checkpoint  later saves %7.1f ms, first %7.1f ms -> / sync save = %.3f (first %.3f)\n"
          "  overlapped step       %7.1f ms over %d steps -> / normal step = %.2f\n"
          "  peak extra host mem   %7.1f MiB (staging held %.1f MiB) -> / (W x budget) = %.3f\n",
          static_cast<int>(budget >> 20), budget >= state_bytes / world ? "above" : "below", state_bytes / world / kMiB,
          warm * 1e3, first * 1e3, warm / sync_save, first / sync_save, f.overlapped_step * 1e3,
          f.overlapped_steps, f.overlapped_steps > 0 ? f.overlapped_step / normal_step : 0.0, f.peak_extra / kMiB,
          f.staging / kMiB, static_cast<double>(f.peak_extra) / (static_cast<double>(budget) * world));
    }
    return absl::OkStatus();
  });
  std::filesystem::remove_all(root);
  if (!status.ok()) {
    std::cerr << status << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("async_checkpoint_bench [--gib=0.5] [--budget_mib=256,64] [--dir=DIR]");
  shardlight::tools::flags::ParseFlagsOrExit(argc, argv);
  return Run();
}
