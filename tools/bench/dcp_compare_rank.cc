// shardlight's side of tools/bench/dcp_compare.sh: one rank of a torchrun job
// saving and loading the comparison's workload, and the plain-I/O baselines of
// the same bytes, measured in the same job.
//
//   torchrun --nproc_per_node=W dcp_compare_rank --phase=w4|w3 --workload=size:0.5|count:10000 --dir=DIR
//
// The workload is dcp_compare_peer.py's (same shapes, same values; see there):
// even tensors row-sharded over the ranks (ShardedTensor, ChunkShardingSpec:
// torch.chunk's rows, so uneven and empty shards as DTensor's Shard(0)), odd
// tensors dense on every rank (saved once, by rank 0).
// Phase w4: save (SaveCheckpoint: one data file per rank, block checksums,
// fsync, atomic commit), load with the page cache kept and dropped, an
// AsyncCheckpointer's blocking time and total; the baselines: each rank's
// bytes written as one file + fsync, read back (cache kept and dropped),
// copied once into resident memory (async's floor), and the bytes a load
// fills on the rank read with pread + CRC32C (the verified-read ceiling). Phase w3: the W=4
// checkpoint loaded by W ranks (resharding) beside a plain read of each
// rank's new bytes. Rank 0 prints "RESULT shardlight|plain <metric> <s>"
// (best of --repeats) and "BYTES <n>"; every load is checked element by
// element after its timing. Save and warm load also print rank 0's split of
// its time: data (writing / reading the bytes) and metadata (the rest: plan,
// agreements, index).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lightning/cluster/distributed.h"
#include "sharded/checkpoint/async/async_checkpointer.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/collectives.h"
#include "sharded/sharded_tensor.h"
#include "sharded/sharding_spec.h"
#include "sharded/state_dict.h"
#include "sharded/status_macros.h"
#include "tools/bench/bench_phases.h"
#include "tools/bench/bench_workload.h"
#include "tools/bench/launcher_job.h"
#include "flags/strict_flags.h"

ABSL_FLAG(std::string, phase, "w4", "w4: save, load, async and the baselines; w3: the resharding load");
ABSL_FLAG(std::string, workload, "size:0.1", "size:GiB (64 tensors) or count:N (small tensors)");
ABSL_FLAG(std::string, dir, "", "working directory on the disk to measure (shared by every rank)");
ABSL_FLAG(int, repeats, 3, "times each phase runs; the best time is printed");

namespace shardlight {
namespace {

namespace ckpt = sharded::checkpoint;
using Clock = std::chrono::steady_clock;
using sharded::ShardedTensor;
using sharded::StateDict;
using tools::bench::BenchTensor;
using tools::bench::BuildBenchState;
using tools::bench::CheckBenchState;
using tools::bench::LocalBytes;
using tools::bench::ReadPlainFile;
using tools::bench::WritePlainFile;
using tools::bench::ZeroBenchState;

class Phases {
 public:
  explicit Phases(c10d::ProcessGroup& pg) : pg_(pg) {}

  absl::Status Barrier() { return sharded::RunCollective(pg_, "barrier", [&] { return pg_.barrier(); }); }

  // Times `body` between barriers; keeps the best under `name`. `before`
  // runs on rank 0 only, outside the timing.
  template <typename B, typename F>
  absl::Status Time(const std::string& name, B&& before, F&& body) {
    if (pg_.getRank() == 0) before();
    SL_RETURN_IF_ERROR(Barrier());
    const auto start = Clock::now();
    SL_RETURN_IF_ERROR(body());
    SL_RETURN_IF_ERROR(Barrier());
    Record(name, std::chrono::duration<double>(Clock::now() - start).count());
    return absl::OkStatus();
  }
  template <typename F>
  absl::Status Time(const std::string& name, F&& body) {
    return Time(name, [] {}, std::forward<F>(body));
  }

  void Record(const std::string& name, double seconds) {
    auto [it, inserted] = best_.emplace(name, seconds);
    if (!inserted) it->second = std::min(it->second, seconds);
  }

  void Print() const {
    if (pg_.getRank() != 0) return;
    for (const auto& [name, seconds] : best_) {
      const size_t dot = name.find('.');
      std::printf("RESULT %s %s %.6f\n", name.substr(0, dot).c_str(), name.substr(dot + 1).c_str(), seconds);
    }
    std::fflush(stdout);
  }

 private:
  c10d::ProcessGroup& pg_;
  std::map<std::string, double> best_;
};

absl::Status RunW4(lightning::cluster::DistributedContext& job, const std::vector<BenchTensor>& specs,
                   const std::string& dir, int repeats, Phases& phases) {
  auto pg = job.pg();
  const int rank = pg->getRank();
  const std::string ckpt_dir = dir + "/shardlight", plain_dir = dir + "/plain", async_dir = dir + "/shardlight_async";
  std::filesystem::create_directories(plain_dir);
  SL_ASSIGN_OR_RETURN(StateDict state, BuildBenchState(specs, /*fill=*/true, pg));
  const std::vector<char> mine = LocalBytes(state, rank, /*saved_only=*/true);
  const std::string plain = absl::StrCat(plain_dir, "/rank-", rank, ".bin");
  std::vector<char> scratch;
  for (int r = 0; r < repeats; ++r) {
    SL_RETURN_IF_ERROR(phases.Time("plain.write_fsync", [&] { return WritePlainFile(plain, mine, true); }));
    ckpt::SaveStats stats;
    SL_RETURN_IF_ERROR(
        phases.Time("shardlight.save", [&] { return ckpt::SaveCheckpoint(state, ckpt_dir, *pg, {}, &stats); }));
    phases.Record("shardlight.save_metadata", stats.metadata_seconds);
    phases.Record("shardlight.save_data", stats.data_seconds);
  }
  // One copy into memory already resident: what an async save must at least
  // cost the caller.
  std::vector<char> resident(mine.size(), 1);
  for (int r = 0; r < repeats; ++r) {
    SL_RETURN_IF_ERROR(phases.Time("plain.copy_resident", [&] {
      std::memcpy(resident.data(), mine.data(), mine.size());
      return absl::OkStatus();
    }));
  }
  // The read baselines cover the bytes a load fills on this rank: its shards
  // and every dense tensor (each rank loads those), as one file of its own.
  const std::string loaded = absl::StrCat(plain_dir, "/loaded-rank-", rank, ".bin");
  SL_RETURN_IF_ERROR(WritePlainFile(loaded, LocalBytes(state, rank, /*saved_only=*/false), true));
  SL_ASSIGN_OR_RETURN(StateDict target, BuildBenchState(specs, /*fill=*/false, pg));
  const std::string who = absl::StrCat("rank ", rank);
  for (int r = 0; r < repeats; ++r) {
    SL_RETURN_IF_ERROR(phases.Time("plain.read_warm", [&] { return ReadPlainFile(loaded, scratch, false); }));
    SL_RETURN_IF_ERROR(phases.Time("plain.read_crc_warm", [&] { return ReadPlainFile(loaded, scratch, true); }));
    ZeroBenchState(target);
    ckpt::LoadStats stats;
    SL_RETURN_IF_ERROR(phases.Time("shardlight.load_warm",
                                   [&] { return ckpt::LoadCheckpoint(target, ckpt_dir, *pg, {}, &stats); }));
    phases.Record("shardlight.load_metadata", stats.metadata_seconds);
    phases.Record("shardlight.load_data", stats.data_seconds);
    SL_RETURN_IF_ERROR(CheckBenchState(target, who));
  }
  for (int r = 0; r < repeats; ++r) {
    SL_RETURN_IF_ERROR(phases.Time("plain.read_cold", [&] { tools::bench::DropCache(plain_dir); },
                                   [&] { return ReadPlainFile(loaded, scratch, false); }));
    ZeroBenchState(target);
    SL_RETURN_IF_ERROR(phases.Time("shardlight.load_cold", [&] { tools::bench::DropCache(ckpt_dir); },
                                   [&] { return ckpt::LoadCheckpoint(target, ckpt_dir, *pg); }));
    SL_RETURN_IF_ERROR(CheckBenchState(target, who));
  }
  ::unlink(loaded.c_str());
  target = StateDict();
  scratch = std::vector<char>();
  // The async checkpointer on its own group (async_checkpointer.h), staging
  // made resident first, as the Trainer does; one untimed warm-up save.
  SL_ASSIGN_OR_RETURN(auto group, job.groups()->Make("async_checkpoint"));
  ckpt::AsyncCheckpointOptions options;
  options.staging_budget_bytes = std::max<int64_t>(static_cast<int64_t>(mine.size()) + (int64_t{64} << 20),
                                                   ckpt::AsyncCheckpointOptions().staging_budget_bytes);
  SL_ASSIGN_OR_RETURN(auto checkpointer, ckpt::AsyncCheckpointer::Create(async_dir, group, options));
  checkpointer->Reserve(state);
  int64_t step = 0;
  {
    SL_ASSIGN_OR_RETURN(auto handle, checkpointer->Save(state, step++));
    SL_RETURN_IF_ERROR(handle->Wait());
  }
  for (int r = 0; r < repeats; ++r) {
    SL_RETURN_IF_ERROR(phases.Barrier());
    const auto start = Clock::now();
    SL_ASSIGN_OR_RETURN(auto handle, checkpointer->Save(state, step++));
    SL_RETURN_IF_ERROR(phases.Barrier());
    phases.Record("shardlight.async_block", std::chrono::duration<double>(Clock::now() - start).count());
    SL_RETURN_IF_ERROR(handle->Wait());
    SL_RETURN_IF_ERROR(phases.Barrier());
    phases.Record("shardlight.async_total", std::chrono::duration<double>(Clock::now() - start).count());
  }
  return absl::OkStatus();
}

absl::Status RunW3(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, const std::vector<BenchTensor>& specs,
                   const std::string& dir, int repeats, Phases& phases) {
  const int rank = pg->getRank();
  const std::string ckpt_dir = dir + "/shardlight";
  SL_ASSIGN_OR_RETURN(StateDict target, BuildBenchState(specs, /*fill=*/true, pg));
  // The baseline: each rank's new bytes, read back from one file of its own.
  const std::string plain = absl::StrCat(dir, "/plain/w3-rank-", rank, ".bin");
  SL_RETURN_IF_ERROR(WritePlainFile(plain, LocalBytes(target, rank, /*saved_only=*/false), false));
  std::vector<char> scratch;
  for (int r = 0; r < repeats; ++r) {
    SL_RETURN_IF_ERROR(phases.Time("plain.reshard_read_warm", [&] { return ReadPlainFile(plain, scratch, false); }));
    ZeroBenchState(target);
    SL_RETURN_IF_ERROR(phases.Time("shardlight.reshard_load", [&] { return ckpt::LoadCheckpoint(target, ckpt_dir, *pg); }));
    SL_RETURN_IF_ERROR(CheckBenchState(target, absl::StrCat("rank ", rank)));
  }
  ::unlink(plain.c_str());
  return absl::OkStatus();
}

int Main() {
  const std::string phase = absl::GetFlag(FLAGS_phase), dir = absl::GetFlag(FLAGS_dir);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  if ((phase != "w4" && phase != "w3") || dir.empty() || repeats < 1 || repeats > 100) {
    std::fprintf(stderr, "dcp_compare_rank: --phase must be w4 or w3, --dir given, --repeats in [1, 100]\n");
    return 2;
  }
  int exit_code = 0;
  auto job = tools::bench::JoinLauncherJob("dcp_compare_rank", std::chrono::minutes(20), &exit_code);
  if (job == nullptr) return exit_code;
  const lightning::cluster::ProcessPlacement& placement = job->placement();
  auto specs = tools::bench::BenchShapes(absl::GetFlag(FLAGS_workload), placement.world_size);
  if (!specs.ok()) {
    std::fprintf(stderr, "dcp_compare_rank: %s\n", specs.status().ToString().c_str());
    return 2;
  }
  at::set_num_threads(1);
  Phases phases(*job->pg());
  if (placement.rank == 0) {
    int64_t bytes = 0;
    for (const BenchTensor& s : *specs) {
      int64_t n = 4;
      for (int64_t d : s.shape) n *= d;
      bytes += n;
    }
    std::printf("BYTES %lld\n", static_cast<long long>(bytes));
  }
  const absl::Status s = phase == "w4" ? RunW4(*job, *specs, dir, repeats, phases)
                                       : RunW3(job->pg(), *specs, dir, repeats, phases);
  if (!s.ok()) {
    std::fprintf(stderr, "dcp_compare_rank: rank %d: %s\n", placement.rank, s.ToString().c_str());
    return 1;
  }
  phases.Print();
  (void)job->Leave();
  return 0;
}

}  // namespace
}  // namespace shardlight

int main(int argc, char** argv) {
  shardlight::tools::flags::ParseFlagsOrExit(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  return shardlight::Main();
}
