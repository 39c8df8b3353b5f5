// shardlight's side of tools/bench/s3_compare.sh: one rank of a torchrun job
// saving its part of the comparison's workload to an S3 location and loading
// it back (the same world size), through the AWS_* configuration as any
// s3:// location.
//
//   torchrun --nproc_per_node=W s3_compare_rank --workload=size:0.5|count:N --dir=s3://BUCKET/PREFIX
//
// The workload is dcp_compare_peer.py's (BenchShapes). Each repeat saves to
// a fresh DIR/sl-<r>; every load is checked element by element after its
// timing. Rank 0 prints "RESULT shardlight save|load <seconds>" (best of
// --repeats) and "BYTES <n>".
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "lightning/cluster/distributed.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/collectives.h"
#include "sharded/status_macros.h"
#include "tools/bench/bench_workload.h"
#include "tools/bench/launcher_job.h"
#include "flags/strict_flags.h"

ABSL_FLAG(std::string, workload, "size:0.5", "size:GiB (64 tensors) or count:N (small tensors)");
ABSL_FLAG(std::string, dir, "", "an s3://bucket/prefix location (each repeat under a fresh sl-<r>)");
ABSL_FLAG(int, repeats, 2, "times each phase runs; the best time is printed");

namespace shardlight {
namespace {

namespace ckpt = sharded::checkpoint;
using Clock = std::chrono::steady_clock;

absl::Status Run(c10d::ProcessGroup& pg, const c10::intrusive_ptr<c10d::ProcessGroup>& pg_ptr,
                 const std::vector<tools::bench::BenchTensor>& specs, const std::string& dir, int repeats) {
  auto barrier = [&] { return sharded::RunCollective(pg, "barrier", [&] { return pg.barrier(); }); };
  auto timed = [&](auto&& body) -> absl::StatusOr<double> {
    SL_RETURN_IF_ERROR(barrier());
    const auto start = Clock::now();
    SL_RETURN_IF_ERROR(body());
    SL_RETURN_IF_ERROR(barrier());
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  SL_ASSIGN_OR_RETURN(sharded::StateDict state, tools::bench::BuildBenchState(specs, /*fill=*/true, pg_ptr));
  double save = 1e30, load = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const std::string at = absl::StrCat(dir, "/sl-", r);
    SL_ASSIGN_OR_RETURN(double s, timed([&] { return ckpt::SaveCheckpoint(state, at, pg); }));
    save = std::min(save, s);
    tools::bench::ZeroBenchState(state);
    SL_ASSIGN_OR_RETURN(double l, timed([&] { return ckpt::LoadCheckpoint(state, at, pg); }));
    load = std::min(load, l);
    SL_RETURN_IF_ERROR(tools::bench::CheckBenchState(state, absl::StrCat("rank ", pg.getRank())));
  }
  if (pg.getRank() == 0) std::printf("RESULT shardlight save %.6f\nRESULT shardlight load %.6f\n", save, load);
  return absl::OkStatus();
}

int Main() {
  const std::string dir = absl::GetFlag(FLAGS_dir);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  if (dir.rfind("s3://", 0) != 0 || repeats < 1 || repeats > 100) {
    std::fprintf(stderr, "s3_compare_rank: --dir must be s3://bucket/prefix, --repeats in [1, 100]\n");
    return 2;
  }
  int exit_code = 0;
  auto job = tools::bench::JoinLauncherJob("s3_compare_rank", std::chrono::minutes(20), &exit_code);
  if (job == nullptr) return exit_code;
  auto specs = tools::bench::BenchShapes(absl::GetFlag(FLAGS_workload), job->placement().world_size);
  if (!specs.ok()) {
    std::fprintf(stderr, "s3_compare_rank: %s\n", specs.status().ToString().c_str());
    return 2;
  }
  at::set_num_threads(1);
  if (job->placement().rank == 0) {
    int64_t bytes = 0;
    for (const auto& s : *specs) {
      int64_t n = 4;
      for (int64_t d : s.shape) n *= d;
      bytes += n;
    }
    std::printf("BYTES %lld\n", static_cast<long long>(bytes));
  }
  const absl::Status s = Run(*job->pg(), job->pg(), *specs, dir, repeats);
  if (!s.ok()) {
    std::fprintf(stderr, "s3_compare_rank (rank %d): %s\n", job->placement().rank, s.ToString().c_str());
    return 1;
  }
  std::fflush(stdout);
  (void)job->Leave();
  return 0;
}

}  // namespace
}  // namespace shardlight

int main(int argc, char** argv) {
  shardlight::tools::flags::ParseFlagsOrExit(argc, argv);
  return shardlight::Main();
}
