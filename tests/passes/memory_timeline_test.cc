#include "passes/memory_timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <sstream>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tests/support/xml_check.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

TEST(MemoryTimelineTest, TheReaderRejectsWhatABrowserWould) {
  EXPECT_TRUE(ParseXml("<svg><g/><text>a &amp; b</text></svg>").ok());
  EXPECT_EQ(ParseXml("<svg><text>a & b</text></svg>").status().message(), "bare '&' at byte 13");
  EXPECT_EQ(ParseXml("<svg><g></svg>").status().message(), "</svg> does not close g");
  EXPECT_EQ(ParseXml("<svg x=1/>").status().message(),
            "attribute without =\"...\" in <svg> at byte 0");
  EXPECT_EQ(ParseXml("<svg/><svg/>").status().message(), "a second root element at byte 6");
}

// The value of attribute `attr` of the first element starting with `element`; -1 when absent.
double Attribute(const std::string& svg, const std::string& element, const std::string& attr) {
  size_t e = svg.find(element);
  if (e == std::string::npos) return -1;
  size_t a = svg.find(" " + attr + "=\"", e);
  return a == std::string::npos ? -1 : std::stod(svg.substr(a + attr.size() + 3));
}

// The smallest y (the highest point drawn) over every polygon's points.
double SmallestPolygonY(const std::string& svg) {
  double best = 1e9;
  for (size_t p = svg.find("<polygon"); p != std::string::npos; p = svg.find("<polygon", p + 1)) {
    size_t begin = svg.find("points=\"", p) + 8, end = svg.find('"', begin);
    std::istringstream pts(svg.substr(begin, end - begin));
    std::string xy;
    while (pts >> xy) best = std::min(best, std::stod(xy.substr(xy.find(',') + 1)));
  }
  return best;
}

// 6 steps: forward 0..2, backward 3..5; the peak at step 2 (1 MiB saved + 0.5 MiB transient).
MemoryReport SmallReport() {
  MemoryReport r;
  r.model = "models/a&b<1>.onnx";  // must come out escaped
  r.dims = {{"batch", 1}, {"seq", 1024}};
  r.backend = "cpu";
  const int64_t mib = 1 << 20;
  r.steps = {{mib / 2, 0, 0, Phase::kForward},        {mib, 256, 0, Phase::kForward},
             {mib, mib / 2, 0, Phase::kForward},      {mib, 0, 4096, Phase::kBackward},
             {mib / 2, mib / 4, 0, Phase::kBackward}, {0, 1024, 0, Phase::kBackward}};
  r.layout = {"cpu", 2 * mib, mib + mib / 2, 2, "Exp_7", 0};
  r.saved_for_backward_bytes = mib;
  return r;
}

TEST(MemoryTimelineTest, IsWellFormedAndLabelsThePeak) {
  MemoryReport r = SmallReport();
  const std::string svg = MemoryTimelineSvg(r);
  auto names = ParseXml(svg);
  ASSERT_TRUE(names.ok()) << names.status().message() << "\n" << svg;
  EXPECT_EQ(TimelinePeakLabel(r), "peak 1.5 MiB at step 2 (node 'Exp_7')");
  EXPECT_NE(svg.find(">peak 1.5 MiB at step 2 (node 'Exp_7')<"), std::string::npos) << svg;
  EXPECT_NE(svg.find("models/a&amp;b&lt;1&gt;.onnx (batch=1, seq=1024)"), std::string::npos);
  EXPECT_NE(svg.find(">live bytes (MiB)<"), std::string::npos);
  EXPECT_EQ(SmallestPolygonY(svg), Attribute(svg, "<circle", "cy"));  // the stack peaks at the dot
  // Three stacked kinds, one band per phase run, legend entries for both phases.
  int polygons = 0;
  for (const auto& n : *names) polygons += n == "polygon";
  EXPECT_EQ(polygons, 3);
  for (const char* label :
       {">saved activations<", ">transients<", ">workspace<", ">forward<", ">backward<"})
    EXPECT_NE(svg.find(label), std::string::npos) << label;
  EXPECT_EQ(svg.find(">recompute<"), std::string::npos);  // no recompute steps, no legend entry
}

TEST(MemoryTimelineTest, DrawsExtraCurvesOnTheSameAxes) {
  MemoryReport r = SmallReport();
  TimelineOptions options;
  options.extra_curves.push_back({"without checkpointing", {0, 3 << 20, 1 << 20}});
  const std::string svg = MemoryTimelineSvg(r, options);
  auto names = ParseXml(svg);
  ASSERT_TRUE(names.ok()) << names.status().message();
  int polylines = 0;
  for (const auto& n : *names) polylines += n == "polyline";
  EXPECT_EQ(polylines, 1);
  EXPECT_NE(svg.find(">without checkpointing<"), std::string::npos);
  // The axis reaches the extra curve's 3 MiB, not just the report's 1.5 MiB peak.
  EXPECT_NE(svg.find("text-anchor=\"end\">3<"), std::string::npos);
}

// Far more steps than pixels: each column keeps its largest step, so the peak's height survives.
TEST(MemoryTimelineTest, ManyStepsKeepThePeakColumn) {
  MemoryReport r;
  r.model = "big";
  r.backend = "cpu";
  for (int s = 0; s < 100000; ++s) r.steps.push_back({1 << 20, 0, 0, Phase::kForward});
  r.steps[54321].transient = 1 << 30;
  r.layout = {"cpu", (1 << 30) + (1 << 20), (1 << 30) + (1 << 20), 54321, "n", 0};
  const std::string svg = MemoryTimelineSvg(r);
  ASSERT_TRUE(ParseXml(svg).ok());
  EXPECT_LT(svg.size(), 200000u);  // bounded by the width, not the step count
  EXPECT_NE(svg.find(">live bytes (GiB)<"), std::string::npos);
  EXPECT_NE(svg.find("peak 1.0 GiB at step 54321"), std::string::npos);
  // The stack's top reaches the peak dot (a column's mean would stay near 1 MiB).
  EXPECT_EQ(SmallestPolygonY(svg), Attribute(svg, "<circle", "cy"));
}

}  // namespace
}  // namespace foundry
