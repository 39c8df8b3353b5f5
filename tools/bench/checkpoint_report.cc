// checkpoint_report: one command that measures checkpoint save/load
// throughput against the tensor count and against the world size, each
// beside plain file I/O of the same bytes from the same run, and writes
//   OUT/checkpoint_report.md                  the tables
//   OUT/throughput_vs_tensors.svg             the charts
//   OUT/throughput_vs_world_size.svg
//
//   bazel run -c opt //tools/bench:checkpoint_report -- --out=/tmp/report
//
// Each point is checkpoint_series.h's workload (small float32 tensors of
// mixed sizes, sharded and dense, on thread-ranks). The defaults take a few
// minutes on a 2-core machine.
#include <ATen/Parallel.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/bench/checkpoint_series.h"
#include "tools/bench/dcp_compare_table.h"
#include "tools/bench/svg_chart.h"
#include "flags/strict_flags.h"

ABSL_FLAG(std::string, out, "", "directory the report is written to (created)");
ABSL_FLAG(std::string, dir, "/var/tmp/shardlight_checkpoint_report",
          "scratch directory on the file system to measure; its ckpt/ and plain/ are replaced");
ABSL_FLAG(std::vector<std::string>, tensors, std::vector<std::string>({"500", "2000", "8000"}),
          "tensor counts of the first series (at --world_size)");
ABSL_FLAG(int, world_size, 4, "thread-ranks of the tensor-count series");
ABSL_FLAG(std::vector<std::string>, world_sizes, std::vector<std::string>({"1", "2", "4", "8", "16"}),
          "world sizes of the second series (at --world_tensors)");
ABSL_FLAG(int, world_tensors, 2000, "tensor count of the world-size series");
ABSL_FLAG(int, scale, 8, "multiplies the rows of every tensor (21 KiB average at 8)");
ABSL_FLAG(bool, drop_cache, false, "evict the files from the page cache before each read");
ABSL_FLAG(int, repeats, 2, "times each phase runs; the best time is reported");
ABSL_FLAG(std::string, compare, "",
          "instead of measuring: tools/bench/dcp_compare.sh's results TSV, written up as OUT/dcp_compare.md and "
          "OUT/dcp_compare_{size,count}.svg");
ABSL_FLAG(std::string, compare_bytes, "", "with --compare: its workloads' sizes (\"bytes WORKLOAD N\" lines)");
ABSL_FLAG(int, compare_threads, 1, "with --compare: the DCP thread_count of the run (for the report's text)");
ABSL_FLAG(int, compare_world, 4, "with --compare: the run's world size (for the report's text)");

namespace {

namespace bench = shardlight::tools::bench;
constexpr double kMiB = 1024.0 * 1024.0;

bool ParseCounts(const std::vector<std::string>& texts, const char* flag, int max, std::vector<int>* out) {
  for (const std::string& text : texts) {
    int n = 0;
    if (!absl::SimpleAtoi(text, &n) || n < 1 || n > max) {
      std::cerr << "checkpoint_report: --" << flag << ": '" << text << "' is not in [1, " << max << "]\n";
      return false;
    }
    out->push_back(n);
  }
  if (out->empty()) std::cerr << "checkpoint_report: --" << flag << " is empty\n";
  return !out->empty();
}

double MiBs(const bench::SeriesPoint& p, double seconds) { return p.bytes / kMiB / seconds; }

std::string Table(const std::string& first_column, const std::vector<bench::SeriesPoint>& points, bool by_world) {
  std::string md = absl::StrCat(
      "| ", first_column,
      " | MiB | save MiB/s | plain write MiB/s | save ratio | load MiB/s | plain read MiB/s | load ratio | save us/tensor "
      "| load us/tensor |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const bench::SeriesPoint& p : points) {
    absl::StrAppend(&md, absl::StrFormat("| %d | %.1f | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f | %.1f | %.1f |\n",
                                         by_world ? p.world_size : p.tensors, p.bytes / kMiB, MiBs(p, p.save_s),
                                         MiBs(p, p.plain_write_s), p.save_ratio(), MiBs(p, p.load_s),
                                         MiBs(p, p.plain_read_s), p.load_ratio(), p.save_per_tensor_us(),
                                         p.load_per_tensor_us()));
  }
  return md;
}

bench::Chart ChartOf(const std::string& title, const std::string& x_label, bool log_x,
                     const std::vector<bench::SeriesPoint>& points, bool by_world) {
  bench::Chart chart{title, x_label, "MiB/s (all ranks)", log_x, {}};
  chart.series = {{"save", "#1f77b4", false, {}},
                  {"plain write", "#1f77b4", true, {}},
                  {"load", "#d62728", false, {}},
                  {"plain read", "#d62728", true, {}}};
  for (const bench::SeriesPoint& p : points) {
    const double x = by_world ? p.world_size : p.tensors;
    chart.series[0].points.emplace_back(x, MiBs(p, p.save_s));
    chart.series[1].points.emplace_back(x, MiBs(p, p.plain_write_s));
    chart.series[2].points.emplace_back(x, MiBs(p, p.load_s));
    chart.series[3].points.emplace_back(x, MiBs(p, p.plain_read_s));
  }
  return chart;
}

bool WriteText(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out.flush()) {
    std::cerr << "checkpoint_report: cannot write " << path << "\n";
    return false;
  }
  return true;
}

// The DCP comparison's table and charts, from dcp_compare.sh's figures.
int WriteCompare(const std::filesystem::path& dir) {
  auto report = bench::BuildDcpCompareReport(
      {absl::GetFlag(FLAGS_compare), absl::GetFlag(FLAGS_compare_bytes), absl::GetFlag(FLAGS_compare_threads),
       absl::GetFlag(FLAGS_compare_world)});
  if (!report.ok()) {
    std::cerr << "checkpoint_report: " << report.status() << "\n";
    return 1;
  }
  std::cout << report->text;
  if (!WriteText(dir / "dcp_compare.md", report->markdown) || !WriteText(dir / "dcp_compare_size.svg", report->size_svg) ||
      !WriteText(dir / "dcp_compare_count.svg", report->count_svg)) {
    return 1;
  }
  std::cout << "wrote " << (dir / "dcp_compare.md").string() << " and two SVG charts\n";
  return 0;
}

int Run() {
  const std::string out = absl::GetFlag(FLAGS_out);
  std::vector<int> tensors, worlds;
  if (out.empty()) {
    std::cerr << "checkpoint_report: --out is required\n";
    return 2;
  }
  if (!ParseCounts(absl::GetFlag(FLAGS_tensors), "tensors", 1000000, &tensors) ||
      !ParseCounts(absl::GetFlag(FLAGS_world_sizes), "world_sizes", 64, &worlds)) {
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) {
    std::cerr << "checkpoint_report: cannot create " << out << ": " << ec.message() << "\n";
    return 1;
  }
  if (!absl::GetFlag(FLAGS_compare).empty()) return WriteCompare(out);
  at::set_num_threads(1);
  bench::SeriesConfig config;
  config.dir = absl::GetFlag(FLAGS_dir);
  config.scale = absl::GetFlag(FLAGS_scale);
  config.drop_cache = absl::GetFlag(FLAGS_drop_cache);
  config.repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  auto measure = [&](std::vector<bench::SeriesPoint>* points) {
    auto p = bench::MeasureSeriesPoint(config);
    if (!p.ok()) {
      std::cerr << "checkpoint_report: " << config.tensors << " tensors at W=" << config.world_size
                << " failed: " << p.status() << "\n";
      return false;
    }
    std::cout << absl::StrFormat("  %6d tensors W=%-2d  save %.3f s (plain %.3f)  load %.3f s (plain %.3f)\n",
                                 p->tensors, p->world_size, p->save_s, p->plain_write_s, p->load_s, p->plain_read_s);
    points->push_back(*p);
    return true;
  };
  std::vector<bench::SeriesPoint> by_tensors, by_world;
  config.world_size = absl::GetFlag(FLAGS_world_size);
  for (int n : tensors) {
    config.tensors = n;
    if (!measure(&by_tensors)) return 1;
  }
  config.tensors = absl::GetFlag(FLAGS_world_tensors);
  for (int w : worlds) {
    config.world_size = w;
    if (!measure(&by_world)) return 1;
  }
  const std::string workload = absl::StrFormat(
      "Small float32 tensors of mixed sizes (shapes [2,2], [8,8], [16,32], [64,32] with rows x %d; even ones chunked "
      "on dim 0 over the ranks, odd ones dense), saved and loaded by thread-ranks of one process. Plain = each rank "
      "writes (then fsyncs) and reads its own bytes as one file, in the same run. Page cache %s before reads; best "
      "of %d. Ratio = checkpoint throughput / plain throughput.",
      config.scale, config.drop_cache ? "dropped" : "kept", config.repeats);
  const std::string md = absl::StrCat(
      "# Checkpoint throughput\n\n", workload, "\n\n## Against the tensor count (W=", absl::GetFlag(FLAGS_world_size),
      ")\n\n![throughput vs tensor count](throughput_vs_tensors.svg)\n\n", Table("tensors", by_tensors, false),
      "\n## Against the world size (", absl::GetFlag(FLAGS_world_tensors),
      " tensors)\n\n![throughput vs world size](throughput_vs_world_size.svg)\n\n", Table("W", by_world, true),
      "\nProduced by `bazel run -c opt //tools/bench:checkpoint_report -- --out=DIR`.\n");
  const std::filesystem::path dir(out);
  if (!WriteText(dir / "checkpoint_report.md", md) ||
      !WriteText(dir / "throughput_vs_tensors.svg",
                 bench::RenderSvg(ChartOf("Checkpoint throughput vs tensor count", "tensors", true, by_tensors, false))) ||
      !WriteText(dir / "throughput_vs_world_size.svg",
                 bench::RenderSvg(ChartOf("Checkpoint throughput vs world size", "world size (thread-ranks)", true,
                                          by_world, true)))) {
    return 1;
  }
  std::cout << "wrote " << (dir / "checkpoint_report.md").string() << " and two SVG charts\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("checkpoint_report --out=DIR: checkpoint throughput tables and charts");
  shardlight::tools::flags::ParseFlagsOrExit(argc, argv);
  return Run();
}
