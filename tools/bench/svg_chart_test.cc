#include "tools/bench/svg_chart.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace shardlight::tools::bench {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

TEST(SvgChartTest, OnePolylinePerSeriesWithItsPointsAndLegend) {
  Chart chart{"Save <vs> load", "tensors", "MiB/s", /*log_x=*/true, {}};
  chart.series = {{"save & co", "#111111", false, {{10, 5}, {100, 7}, {1000, 6}}},
                  {"plain", "#222222", true, {{10, 9}, {1000, 8}}}};
  const std::string svg = RenderSvg(chart);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_THAT(svg, HasSubstr("</svg>"));
  EXPECT_EQ(Count(svg, "<polyline"), 2);
  EXPECT_EQ(Count(svg, "<circle"), 5);
  EXPECT_EQ(Count(svg, "stroke-dasharray"), 2);  // the dashed series' line and legend entry
  EXPECT_THAT(svg, HasSubstr("Save &lt;vs&gt; load"));
  EXPECT_THAT(svg, HasSubstr(">save &amp; co</text>"));
  EXPECT_THAT(svg, Not(HasSubstr("<vs>")));
  EXPECT_THAT(svg, HasSubstr("tensors (log scale)"));
  // Log x: 10, 100, 1000 are evenly spaced (plot from x=70 to x=470).
  EXPECT_THAT(svg, HasSubstr("cx=\"70.0\""));
  EXPECT_THAT(svg, HasSubstr("cx=\"270.0\""));
  EXPECT_THAT(svg, HasSubstr("cx=\"470.0\""));
}

TEST(SvgChartTest, EmptyOrZeroDataStillRenders) {
  Chart chart{"empty", "x", "y", false, {{"none", "red", false, {}}}};
  const std::string svg = RenderSvg(chart);
  EXPECT_THAT(svg, HasSubstr("</svg>"));
  EXPECT_EQ(Count(svg, "<circle"), 0);
}

}  // namespace
}  // namespace shardlight::tools::bench
