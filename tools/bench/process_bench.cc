// Real processes against thread-ranks: the same measurements through a
// process group of either kind (not a test; it prints figures).
//   --mode=threads: W thread-ranks of the simulator;
//   --mode=process: this process is one rank of a launcher's job (torchrun).
// Figures (rank 0): the main job's per-step time, FullTensor() of --mib MiB,
// a raw Gloo allgather of the same bytes (the baseline of this run), and a
// checkpoint save + load of --ckpt_mib MiB. tools/bench/process_vs_threads.sh
// runs both modes and prints the ratios.
#include <ATen/ATen.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "lightning/cluster/distributed.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/collectives.h"
#include "sharded/factories.h"
#include "simulate/core/simulated_cluster.h"
#include "simulate/training_run.h"
#include "tools/bench/launcher_job.h"
#include "flags/strict_flags.h"

ABSL_FLAG(std::string, mode, "threads", "threads or process");
ABSL_FLAG(int, world_size, 4, "threads mode: ranks");
ABSL_FLAG(int, steps, 60, "training steps timed");
ABSL_FLAG(int, mib, 64, "FullTensor size in MiB");
ABSL_FLAG(int, ckpt_mib, 256, "checkpoint size in MiB");
ABSL_FLAG(std::string, dir, "", "checkpoint directory (default: under $TMPDIR)");

namespace shardlight {
namespace {

using Clock = std::chrono::steady_clock;

struct Figures {
  double step_ms = 0, full_ms = 0, raw_ms = 0, save_ms = 0, load_ms = 0;
};

// Records when each step ended.
class StepClock : public lightning::Callback {
 public:
  absl::Status OnStepEnd(const lightning::TrainState&, int64_t, double) override {
    ends.push_back(Clock::now());
    return absl::OkStatus();
  }
  std::vector<Clock::time_point> ends;
};

double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

absl::Status Barrier(c10d::ProcessGroup& pg) { return sharded::RunCollective(pg, "barrier", [&] { return pg.barrier(); }); }

template <typename F>
absl::StatusOr<double> Timed(c10d::ProcessGroup& pg, F&& f) {
  if (auto s = Barrier(pg); !s.ok()) return s;
  const auto start = Clock::now();
  if (auto s = f(); !s.ok()) return s;
  if (auto s = Barrier(pg); !s.ok()) return s;
  return Ms(start, Clock::now());
}

absl::StatusOr<Figures> Measure(c10::intrusive_ptr<c10d::ProcessGroup> pg, const std::string& dir) {
  Figures f;
  const int w = pg->getSize();
  // 1. Training steps (steady state: from the first step's end to the last's).
  simulate::TrainingRunOptions run;
  run.max_steps = absl::GetFlag(FLAGS_steps) + 1;
  auto clock = std::make_shared<StepClock>();
  run.callbacks.push_back(clock);
  auto trained = simulate::TrainRank(run, pg);
  if (!trained.ok()) return trained.status();
  f.step_ms = Ms(clock->ends.front(), clock->ends.back()) / (clock->ends.size() - 1);

  // 2. FullTensor vs a raw allgather of the same bytes.
  const int64_t cols = 1024, rows = std::max<int64_t>(w, int64_t{absl::GetFlag(FLAGS_mib)} * (1 << 20) / 4 / cols / w * w);
  auto st = sharded::Rand(sharded::ChunkShardingSpec::OnRanks(0, w), {rows, cols}, 7, {}, pg);
  if (!st.ok()) return st.status();
  auto full = Timed(*pg, [&] { return st->FullTensor().status(); });
  if (!full.ok()) return full.status();
  f.full_ms = *full;
  std::vector<at::Tensor> in = {st->local_shards()[0].tensor};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < w; ++r) out[0].push_back(at::empty_like(in[0]));
  auto raw = Timed(*pg, [&] { return sharded::RunCollective(*pg, "allgather", [&] { return pg->allgather(out, in); }); });
  if (!raw.ok()) return raw.status();
  f.raw_ms = *raw;

  // 3. Checkpoint save + load.
  const int64_t ck_rows = std::max<int64_t>(w, int64_t{absl::GetFlag(FLAGS_ckpt_mib)} * (1 << 20) / 4 / cols / w * w);
  auto table = sharded::Rand(sharded::ChunkShardingSpec::OnRanks(0, w), {ck_rows, cols}, 9, {}, pg);
  if (!table.ok()) return table.status();
  sharded::StateDict dict;
  if (auto s = dict.Insert("table", *table); !s.ok()) return s;
  auto save = Timed(*pg, [&] { return sharded::checkpoint::SaveCheckpoint(dict, dir, *pg); });
  if (!save.ok()) return save.status();
  f.save_ms = *save;
  auto load = Timed(*pg, [&] { return sharded::checkpoint::LoadCheckpoint(dict, dir, *pg); });
  if (!load.ok()) return load.status();
  f.load_ms = *load;
  return f;
}

void Print(const std::string& mode, int w, const Figures& f) {
  std::printf("%s W=%d: step_ms %.3f full_tensor_ms %.1f raw_allgather_ms %.1f save_ms %.1f load_ms %.1f (%d MiB, %d MiB)\n",
              mode.c_str(), w, f.step_ms, f.full_ms, f.raw_ms, f.save_ms, f.load_ms, absl::GetFlag(FLAGS_mib),
              absl::GetFlag(FLAGS_ckpt_mib));
}

int Main() {
  const std::string mode = absl::GetFlag(FLAGS_mode);
  std::string dir = absl::GetFlag(FLAGS_dir);
  simulate::TempDir temp;
  if (dir.empty()) dir = temp.path() + "/ckpt";
  if (mode == "threads") {
    const int w = absl::GetFlag(FLAGS_world_size);
    simulate::ClusterOptions options;
    options.collective_timeout = std::chrono::minutes(5);
    simulate::SimulatedCluster cluster(w, options);
    auto figures = cluster.Run([&](simulate::RankContext& ctx) { return Measure(ctx.pg, dir); });
    if (!figures.ok()) {
      std::fprintf(stderr, "process_bench: %s\n", figures.status().ToString().c_str());
      return 1;
    }
    Print("threads", w, (*figures)[0]);
    return 0;
  }
  if (mode != "process") {
    std::fprintf(stderr, "process_bench: --mode must be threads or process\n");
    return 2;
  }
  int exit_code = 0;
  auto job = tools::bench::JoinLauncherJob("process_bench", std::chrono::minutes(5), &exit_code);
  if (job == nullptr) return exit_code;
  const int rank = job->placement().rank, world = job->placement().world_size;
  // Every process must checkpoint into the same directory.
  if (absl::GetFlag(FLAGS_dir).empty() && world > 1) {
    std::fprintf(stderr, "process_bench: --dir is required with --mode=process\n");
    return 2;
  }
  auto figures = Measure(job->pg(), dir);
  if (!figures.ok()) {
    std::fprintf(stderr, "process_bench: rank %d: %s\n", rank, figures.status().ToString().c_str());
    return 1;
  }
  (void)job->Leave();
  if (rank == 0) Print("processes", world, *figures);
  return 0;
}

}  // namespace
}  // namespace shardlight

int main(int argc, char** argv) {
  shardlight::tools::flags::ParseFlagsOrExit(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  return shardlight::Main();
}
