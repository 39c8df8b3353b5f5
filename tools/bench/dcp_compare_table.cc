#include "tools/bench/dcp_compare_table.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tools/bench/svg_chart.h"

namespace shardlight::tools::bench {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// One row of the table: a figure of both systems and its baseline.
struct Figure {
  const char* name;
  const char* metric;    // dcp.<metric> and shardlight.<metric>
  const char* baseline;  // plain.<baseline>, or "" for none
  const char* baseline_name;
};

constexpr Figure kFigures[] = {
    {"save (fsync)", "save", "write_fsync", "write+fsync"},
    {"load, cache kept", "load_warm", "read_crc_warm", "pread+CRC32C"},
    {"load, cache dropped", "load_cold", "read_cold", "read, cold"},
    {"resharding load", "reshard_load", "reshard_read_warm", "read"},
    {"async save, blocking", "async_block", "copy_resident", "one copy"},
    {"async save, total", "async_total", "", ""},
    {"save: metadata part", "save_metadata", "", ""},
    {"save: data part", "save_data", "", ""},
    {"load: metadata part", "load_metadata", "", ""},
    {"load: data part", "load_data", "", ""},
};

struct Workload {
  std::string name;
  int64_t bytes = 0;
  std::map<std::string, double> best;  // "system.metric" -> seconds
  bool is_count() const { return name.rfind("count:", 0) == 0; }
  int64_t count() const {
    int64_t n = 0;
    return is_count() && absl::SimpleAtoi(name.substr(6), &n) ? n : 0;
  }
  double gib() const {
    double g = 0;
    return !is_count() && absl::SimpleAtod(name.substr(name.find(':') + 1), &g) ? g : 0;
  }
  double Get(const std::string& system, const std::string& metric) const {
    auto it = best.find(absl::StrCat(system, ".", metric));
    return it == best.end() ? -1 : it->second;
  }
};

// The targets for one row; each "text: met|MISSED", or "".
std::string Targets(const Workload& w, const Figure& f, double dcp, double ours, double base) {
  std::vector<std::string> out;
  auto mark = [&](const std::string& what, bool met) { out.push_back(absl::StrCat(what, ": ", met ? "met" : "MISSED")); };
  const double vs_dcp = dcp > 0 && ours > 0 ? dcp / ours : 0;
  const double vs_base = base > 0 && ours > 0 ? base / ours : 0;
  const std::string m = f.metric;
  const bool big = w.gib() >= 0.5 || w.count() >= 100000;
  const double want = w.count() >= 100000 ? 10 : 2;
  if ((m == "save" || m == "load_warm" || m == "load_cold") && big && dcp > 0) {
    mark(absl::StrFormat(">= %.0fx DCP", want), vs_dcp >= want);
  }
  if (m == "reshard_load" && dcp > 0) mark(">= 2x DCP", vs_dcp >= 2);
  if (m == "save" && base > 0) mark(">= 0.9x write+fsync", vs_base >= 0.9);
  if (m == "load_cold" && base > 0) mark(">= 0.9x cold read", vs_base >= 0.9);
  if (m == "load_warm" && base > 0) mark(">= 0.95x verified read", vs_base >= 0.95);
  if (m == "async_block") {
    if (dcp > 0) mark("<= DCP", ours <= dcp);
    if (base > 0) mark("<= 1.2x one copy", ours <= 1.2 * base);
  }
  std::string s;
  for (const std::string& t : out) absl::StrAppend(&s, s.empty() ? "" : "; ", t);
  return s;
}

std::string Seconds(double s) { return s < 0 ? "-" : absl::StrFormat("%.3f", s); }
std::string Ratio(double a, double b) { return a > 0 && b > 0 ? absl::StrFormat("%.2f", a / b) : "-"; }

absl::StatusOr<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

absl::StatusOr<DcpCompareReport> BuildDcpCompareReport(const DcpCompareInput& input) {
  auto tsv = ReadAll(input.results_tsv);
  if (!tsv.ok()) return tsv.status();
  std::vector<Workload> workloads;
  auto find = [&](const std::string& name) -> Workload& {
    for (Workload& w : workloads) {
      if (w.name == name) return w;
    }
    workloads.push_back({name, 0, {}});
    return workloads.back();
  };
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(*tsv, '\n', absl::SkipEmpty())) {
    if (++line_no == 1) continue;  // the header
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    double s = 0;
    if (f.size() != 4 || !absl::SimpleAtod(f[3], &s) || s < 0) {
      return absl::InvalidArgumentError(absl::StrCat(input.results_tsv, " line ", line_no, " is not 4 fields"));
    }
    Workload& w = find(f[0]);
    const std::string key = absl::StrCat(f[1], ".", f[2]);
    auto [it, inserted] = w.best.emplace(key, s);
    if (!inserted) it->second = std::min(it->second, s);
  }
  if (workloads.empty()) return absl::NotFoundError(absl::StrCat(input.results_tsv, " holds no results"));
  if (!input.bytes_file.empty()) {
    auto bytes = ReadAll(input.bytes_file);
    if (!bytes.ok()) return bytes.status();
    for (absl::string_view line : absl::StrSplit(*bytes, '\n', absl::SkipEmpty())) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      int64_t n = 0;
      if (f.size() != 3 || f[0] != "bytes" || !absl::SimpleAtoi(f[2], &n)) {
        return absl::InvalidArgumentError(absl::StrCat(input.bytes_file, ": bad line '", line, "'"));
      }
      find(f[1]).bytes = n;
    }
  }

  DcpCompareReport r;
  std::string md = absl::StrCat(
      "# shardlight against PyTorch DCP\n\n"
      "The same state dict saved and loaded by `torch.distributed.checkpoint` (FileSystemWriter/Reader, thread_count ",
      input.dcp_threads,
      ", fsync) and by shardlight, each as a torchrun job of ", input.world,
      " processes over Gloo on CPU (the resharding load: ", input.world - 1,
      " processes), on the same disk, in one run, alternating. Even tensors row-sharded (DTensor Shard(0) / ShardedTensor), odd ones dense. Best of the "
      "runs. x DCP = DCP's time / shardlight's; x baseline = the baseline's time / shardlight's (the same job's plain "
      "I/O of the same bytes; for the async blocking time, one copy of the rank's bytes into resident memory). The "
      "metadata and data parts are rank 0's: reading or writing the bytes, and the rest (planning, the metadata "
      "exchange, the index).\n\n"
      "![save and load throughput](dcp_compare_size.svg) ![time per tensor](dcp_compare_count.svg)\n\n"
      "| workload | MiB | figure | DCP s | shardlight s | x DCP | baseline | baseline s | x baseline | targets |\n"
      "|---|---:|---|---:|---:|---:|---|---:|---:|---|\n");
  std::string text = absl::StrFormat("%-13s %9s %-22s %9s %9s %7s %-14s %9s %7s  %s\n", "workload", "MiB", "figure",
                                     "DCP s", "ours s", "x DCP", "baseline", "base s", "x base", "targets");
  Chart size{absl::StrCat("Save and load throughput (W=", input.world, " processes)"), "checkpoint GiB", "GiB/s (all ranks)", true, {}};
  size.series = {{"shardlight save", "#1f77b4", false, {}}, {"DCP save", "#1f77b4", true, {}},
                 {"shardlight load", "#d62728", false, {}}, {"DCP load", "#d62728", true, {}},
                 {"pread+CRC32C", "#7f7f7f", true, {}}};
  Chart count{absl::StrCat("Time per tensor (W=", input.world, " processes, 2.6 KiB tensors)"), "tensors", "microseconds per tensor", true, {}};
  count.series = {{"shardlight save", "#1f77b4", false, {}}, {"DCP save", "#1f77b4", true, {}},
                  {"shardlight load", "#d62728", false, {}}, {"DCP load", "#d62728", true, {}}};
  for (const Workload& w : workloads) {
    const double mib = w.bytes / (1024.0 * 1024.0);
    for (const Figure& f : kFigures) {
      const double dcp = w.Get("dcp", f.metric), ours = w.Get("shardlight", f.metric);
      const double base = f.baseline[0] ? w.Get("plain", f.baseline) : -1;
      if (dcp < 0 && ours < 0) continue;
      const std::string targets = Targets(w, f, dcp, ours, base);
      absl::StrAppend(&text, absl::StrFormat("%-13s %9.1f %-22s %9s %9s %7s %-14s %9s %7s  %s\n", w.name, mib, f.name,
                                             Seconds(dcp), Seconds(ours), Ratio(dcp, ours), f.baseline_name,
                                             Seconds(base), Ratio(base, ours), targets));
      absl::StrAppend(&md, absl::StrFormat("| %s | %.1f | %s | %s | %s | %s | %s | %s | %s | %s |\n", w.name, mib,
                                           f.name, Seconds(dcp), Seconds(ours), Ratio(dcp, ours), f.baseline_name,
                                           Seconds(base), Ratio(base, ours), targets));
    }
    if (w.is_count() && w.count() > 0) {
      const double n = static_cast<double>(w.count());
      const double values[4] = {w.Get("shardlight", "save"), w.Get("dcp", "save"), w.Get("shardlight", "load_warm"),
                                w.Get("dcp", "load_warm")};
      for (int k = 0; k < 4; ++k) {
        if (values[k] > 0) count.series[k].points.emplace_back(n, values[k] / n * 1e6);
      }
      auto us = [&](double s) { return s > 0 ? absl::StrFormat("%.1f", s / n * 1e6) : std::string("-"); };
      absl::StrAppend(&text, absl::StrFormat("%-13s per tensor: save %s us (DCP %s us), load %s us (DCP %s us)\n",
                                             w.name, us(values[0]), us(values[1]), us(values[2]), us(values[3])));
    } else if (w.gib() > 0 && w.bytes > 0) {
      const double g = w.bytes / kGiB;
      const double values[5] = {w.Get("shardlight", "save"), w.Get("dcp", "save"), w.Get("shardlight", "load_warm"),
                                w.Get("dcp", "load_warm"), w.Get("plain", "read_crc_warm")};
      for (int k = 0; k < 5; ++k) {
        if (values[k] > 0) size.series[k].points.emplace_back(w.gib(), g / values[k]);
      }
    }
  }
  for (Chart* c : {&size, &count}) {
    for (ChartSeries& s : c->series) std::sort(s.points.begin(), s.points.end());
  }
  absl::StrAppend(&md, "\nProduced by `bash tools/bench/dcp_compare.sh` (raw figures: dcp_compare.tsv).\n");
  r.text = std::move(text);
  r.markdown = std::move(md);
  r.size_svg = RenderSvg(size);
  r.count_svg = RenderSvg(count);
  return r;
}

}  // namespace shardlight::tools::bench
