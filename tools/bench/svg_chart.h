// A small line chart as an SVG document: a few named series of (x, y)
// points, linear or log-scale x, y from zero, axes with tick labels, a
// legend. What the benchmark report draws; no dependency beyond strings.
#ifndef SHARDLIGHT_TOOLS_BENCH_SVG_CHART_H_
#define SHARDLIGHT_TOOLS_BENCH_SVG_CHART_H_

#include <string>
#include <utility>
#include <vector>

namespace shardlight::tools::bench {

struct ChartSeries {
  std::string name;
  std::string color;  // any SVG colour: "#1f77b4"
  bool dashed = false;
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
};

struct Chart {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_x = false;  // x must then be > 0
  std::vector<ChartSeries> series;
};

// The chart as a standalone SVG document (640 x 400).
std::string RenderSvg(const Chart& chart);

}  // namespace shardlight::tools::bench

#endif  // SHARDLIGHT_TOOLS_BENCH_SVG_CHART_H_
