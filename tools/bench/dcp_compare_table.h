// The report of tools/bench/dcp_compare.sh: its raw figures (one TSV line
// per workload, system, metric and run) turned into the table of every figure
// with its ratios against PyTorch DCP and against the same run's baseline,
// each target of issue 24 marked met or missed, and two SVG charts.
#ifndef SHARDLIGHT_TOOLS_BENCH_DCP_COMPARE_TABLE_H_
#define SHARDLIGHT_TOOLS_BENCH_DCP_COMPARE_TABLE_H_

#include <string>

#include "absl/status/statusor.h"

namespace shardlight::tools::bench {

struct DcpCompareInput {
  std::string results_tsv;  // "workload\tsystem\tmetric\tseconds" lines, a header first
  std::string bytes_file;   // "bytes <workload> <n>" lines
  int dcp_threads = 1;      // FileSystemWriter/Reader thread_count of the run
  int world = 4;            // processes of the run (its resharding load: world - 1)
};

struct DcpCompareReport {
  std::string text;      // the table for a terminal
  std::string markdown;  // dcp_compare.md
  std::string size_svg;  // GiB/s against the checkpoint size
  std::string count_svg; // us per tensor against the tensor count
};

// The best (smallest) time of each figure over the runs. InvalidArgument
// naming the line for a malformed TSV or bytes file; NotFound for a missing
// one or one without results.
absl::StatusOr<DcpCompareReport> BuildDcpCompareReport(const DcpCompareInput& input);

}  // namespace shardlight::tools::bench

#endif  // SHARDLIGHT_TOOLS_BENCH_DCP_COMPARE_TABLE_H_
