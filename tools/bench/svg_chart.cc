#include "tools/bench/svg_chart.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardlight::tools::bench {
namespace {

constexpr double kWidth = 640, kHeight = 400;
constexpr double kLeft = 70, kRight = 170, kTop = 40, kBottom = 50;  // margins; the legend is on the right

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Number(double v) { return absl::StrFormat("%.4g", v); }

}  // namespace

std::string RenderSvg(const Chart& chart) {
  double x_min = 0, x_max = 0, y_max = 0;
  bool any = false;
  for (const ChartSeries& s : chart.series) {
    for (const auto& [x, y] : s.points) {
      if (chart.log_x && x <= 0) continue;
      x_min = any ? std::min(x_min, x) : x;
      x_max = any ? std::max(x_max, x) : x;
      y_max = std::max(y_max, y);
      any = true;
    }
  }
  if (!any) x_min = 0, x_max = 1;
  if (x_max == x_min) x_max = x_min + 1;
  if (y_max <= 0) y_max = 1;
  y_max *= 1.1;
  auto fx = [&](double x) { return chart.log_x ? std::log10(x) : x; };
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (fx(x) - fx(x_min)) / (fx(x_max) - fx(x_min)) * plot_w; };
  auto py = [&](double y) { return kTop + plot_h - y / y_max * plot_h; };

  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      kWidth, kHeight, kWidth, kHeight);
  absl::StrAppend(&svg, "<text x=\"", kWidth / 2, "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">",
                  Escape(chart.title), "</text>\n");
  // Axes, y ticks (5) with grid lines, x ticks at the data's x values.
  absl::StrAppend(&svg, "<line x1=\"", kLeft, "\" y1=\"", kTop + plot_h, "\" x2=\"", kLeft + plot_w, "\" y2=\"",
                  kTop + plot_h, "\" stroke=\"black\"/>\n<line x1=\"", kLeft, "\" y1=\"", kTop, "\" x2=\"", kLeft,
                  "\" y2=\"", kTop + plot_h, "\" stroke=\"black\"/>\n");
  for (int i = 0; i <= 5; ++i) {
    const double y = y_max * i / 5;
    absl::StrAppend(&svg, "<line x1=\"", kLeft, "\" y1=\"", py(y), "\" x2=\"", kLeft + plot_w, "\" y2=\"", py(y),
                    "\" stroke=\"#ddd\"/>\n<text x=\"", kLeft - 6, "\" y=\"", py(y) + 4, "\" text-anchor=\"end\">",
                    Number(y), "</text>\n");
  }
  std::vector<double> xs;
  for (const ChartSeries& s : chart.series) {
    for (const auto& point : s.points) xs.push_back(point.first);
  }
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  for (double x : xs) {
    if (chart.log_x && x <= 0) continue;
    absl::StrAppend(&svg, "<line x1=\"", px(x), "\" y1=\"", kTop + plot_h, "\" x2=\"", px(x), "\" y2=\"",
                    kTop + plot_h + 5, "\" stroke=\"black\"/>\n<text x=\"", px(x), "\" y=\"", kTop + plot_h + 18,
                    "\" text-anchor=\"middle\">", Number(x), "</text>\n");
  }
  absl::StrAppend(&svg, "<text x=\"", kLeft + plot_w / 2, "\" y=\"", kHeight - 12, "\" text-anchor=\"middle\">",
                  Escape(chart.x_label), chart.log_x ? " (log scale)" : "", "</text>\n");
  absl::StrAppend(&svg, "<text x=\"16\" y=\"", kTop + plot_h / 2, "\" text-anchor=\"middle\" transform=\"rotate(-90 16 ",
                  kTop + plot_h / 2, ")\">", Escape(chart.y_label), "</text>\n");
  // One polyline (and dots) per series, then its legend entry.
  for (size_t k = 0; k < chart.series.size(); ++k) {
    const ChartSeries& s = chart.series[k];
    std::string points;
    for (const auto& [x, y] : s.points) {
      if (chart.log_x && x <= 0) continue;
      absl::StrAppend(&points, points.empty() ? "" : " ", absl::StrFormat("%.1f,%.1f", px(x), py(y)));
      absl::StrAppend(&svg, absl::StrFormat("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", px(x), py(y),
                                            Escape(s.color)));
    }
    absl::StrAppend(&svg, "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"", Escape(s.color), "\"",
                    s.dashed ? " stroke-dasharray=\"6 4\"" : "", " points=\"", points, "\"/>\n");
    const double ly = kTop + 10 + 20 * static_cast<double>(k);
    absl::StrAppend(&svg, "<line x1=\"", kWidth - kRight + 15, "\" y1=\"", ly, "\" x2=\"", kWidth - kRight + 45,
                    "\" y2=\"", ly, "\" stroke-width=\"2\" stroke=\"", Escape(s.color), "\"",
                    s.dashed ? " stroke-dasharray=\"6 4\"" : "", "/>\n<text x=\"", kWidth - kRight + 50, "\" y=\"",
                    ly + 4, "\">", Escape(s.name), "</text>\n");
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace shardlight::tools::bench
