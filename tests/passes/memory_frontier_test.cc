// MemoryFrontierSvg: well-formed, every label drawn and apart, every point inside the plot,
// the step line ordered by total, deterministic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <random>
#include <sstream>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "passes/ckpt_budget.h"
#include "tests/support/xml_check.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

// Every element starting with `open` (e.g. "<circle class=\"frontier\""), as attribute -> value.
std::vector<std::map<std::string, std::string>> Elements(const std::string& svg,
                                                         const std::string& open) {
  std::vector<std::map<std::string, std::string>> out;
  for (size_t p = svg.find(open); p != std::string::npos; p = svg.find(open, p + 1)) {
    const size_t end = svg.find('>', p);
    std::map<std::string, std::string> attrs;
    for (size_t k = svg.find(' ', p); k < end;) {
      const size_t eq = svg.find("=\"", k), close = svg.find('"', eq + 2);
      if (eq >= end) break;
      attrs[svg.substr(k + 1, eq - k - 1)] = svg.substr(eq + 2, close - eq - 2);
      k = close + 1;
    }
    // The text content, for <text>.
    const size_t text_end = svg.find('<', end);
    attrs["#text"] = svg.substr(end + 1, text_end - end - 1);
    out.push_back(attrs);
  }
  return out;
}
double D(const std::map<std::string, std::string>& e, const std::string& key) {
  return std::stod(e.at(key));
}

constexpr int64_t kGiB = int64_t{1} << 30;

// A 7B-like picture: plain 100 GiB at 0 %, every block 62 GiB at 33 %, uniform targets between,
// two of them (first-n forms) nearly on top of frontier points and of each other.
std::vector<FrontierPoint> Frontier() {
  std::vector<FrontierPoint> f;
  const double totals[] = {62, 64.5, 68, 71, 75, 79.5, 84, 88, 93, 100};
  const double percents[] = {33, 29.5, 25, 21, 17, 13, 9.5, 6, 3, 0};
  for (int i = 0; i < 10; ++i) f.push_back({int64_t(totals[i] * kGiB), percents[i], ""});
  return f;
}
std::vector<FrontierPoint> Uniform() {
  return {{100 * kGiB, 0, "none"},
          {int64_t(78.0 * kGiB), 15.5, "grouped_query_attention"},
          {int64_t(86.0 * kGiB), 17.0, "mptmlp"},
          {int64_t(66.0 * kGiB), 31.0, "grouped_query_attention + mptmlp"},
          {62 * kGiB, 33, "mptblock"},
          {int64_t(79.5 * kGiB), 13.2, "mptblock=first-13"},
          {int64_t(79.6 * kGiB), 13.0, "grouped_query_attention=first-30"}};
}

struct Plot {
  double x0, y0, x1, y1;
};
Plot PlotArea(const std::string& svg) {
  for (const auto& r : Elements(svg, "<rect x="))
    if (r.count("stroke") && r.at("stroke") == "black" && r.at("fill") == "none")
      return {D(r, "x"), D(r, "y"), D(r, "x") + D(r, "width"), D(r, "y") + D(r, "height")};
  ADD_FAILURE() << "no plot frame";
  return {};
}

TEST(MemoryFrontierSvg, WellFormedLabelledAndInside) {
  const std::string svg = MemoryFrontierSvg("7B <batch 1> & seq 2048", Frontier(), Uniform());
  auto names = ParseXml(svg);
  ASSERT_TRUE(names.ok()) << names.status().message() << "\n" << svg;
  EXPECT_NE(svg.find(">7B &lt;batch 1&gt; &amp; seq 2048<"), std::string::npos);
  EXPECT_NE(svg.find(">planned total of the training step (GiB)<"), std::string::npos);
  EXPECT_NE(svg.find(">recompute FLOPs (% of the step)<"), std::string::npos);
  EXPECT_NE(svg.find(">frontier: the chosen plan for each budget (10 plans)<"), std::string::npos);
  EXPECT_NE(svg.find(">llm-foundry uniform targets<"), std::string::npos);

  const Plot plot = PlotArea(svg);
  const auto circles = Elements(svg, "<circle class=\"frontier\"");
  ASSERT_EQ(circles.size(), 10u);
  for (const auto& c : circles) {
    EXPECT_GE(D(c, "cx"), plot.x0);
    EXPECT_LE(D(c, "cx"), plot.x1);
    EXPECT_GE(D(c, "cy"), plot.y0);
    EXPECT_LE(D(c, "cy"), plot.y1);
  }
  const auto squares = Elements(svg, "<rect class=\"uniform\"");
  ASSERT_EQ(squares.size(), 7u);
  for (const auto& s : squares) {
    EXPECT_GE(D(s, "x") + 4.5, plot.x0);
    EXPECT_LE(D(s, "x") + 4.5, plot.x1);
    EXPECT_GE(D(s, "y") + 4.5, plot.y0);
    EXPECT_LE(D(s, "y") + 4.5, plot.y1);
  }
  // In total order: 0 % (the last, plain) sits on the x axis, 33 % (the first) below the top.
  EXPECT_EQ(D(circles.back(), "cy"), plot.y1);
  EXPECT_GT(D(circles.front(), "cy"), plot.y0 + 10);

  // Every label once, within the canvas, no two overlapping (the drawing's own width estimate,
  // a little over half an em per character at 12 px).
  const auto labels = Elements(svg, "<text class=\"label\"");
  ASSERT_EQ(labels.size(), Uniform().size());
  std::vector<std::string> texts;
  for (const auto& l : labels) texts.push_back(l.at("#text"));
  for (const auto& u : Uniform())
    EXPECT_EQ(std::count(texts.begin(), texts.end(), u.label), 1) << u.label;
  for (size_t i = 0; i < labels.size(); ++i) {
    const double xi = D(labels[i], "x"), yi = D(labels[i], "y");
    const double wi = 6.8 * double(texts[i].size());
    EXPECT_GE(xi, 0);
    EXPECT_LE(xi + wi, 1100);
    for (size_t j = 0; j < i; ++j) {
      const double xj = D(labels[j], "x"), yj = D(labels[j], "y");
      const double wj = 6.8 * double(texts[j].size());
      const bool apart = xi + wi <= xj || xj + wj <= xi || yi + 3 <= yj - 11 || yj + 3 <= yi - 11;
      EXPECT_TRUE(apart) << texts[i] << " overlaps " << texts[j];
    }
  }
}

TEST(MemoryFrontierSvg, StepLineInTotalOrder) {
  std::vector<FrontierPoint> shuffled = Frontier();
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(7));
  const std::string svg = MemoryFrontierSvg("t", shuffled, Uniform());
  EXPECT_EQ(svg, MemoryFrontierSvg("t", Frontier(), Uniform()));  // order-free, deterministic
  const auto lines = Elements(svg, "<polyline class=\"frontier\"");
  ASSERT_EQ(lines.size(), 1u);
  std::istringstream pts(lines[0].at("points"));
  std::vector<std::pair<double, double>> xy;
  for (std::string p; pts >> p;) xy.push_back({std::stod(p), std::stod(p.substr(p.find(',') + 1))});
  // Ten points, a corner before each but the first, the tail to the right edge.
  ASSERT_EQ(xy.size(), 10u + 9u + 1u);
  for (size_t i = 1; i < xy.size(); ++i) {
    EXPECT_GE(xy[i].first, xy[i - 1].first) << i;    // left to right
    EXPECT_GE(xy[i].second, xy[i - 1].second) << i;  // recompute never rises with the budget
    EXPECT_TRUE(xy[i].first == xy[i - 1].first || xy[i].second == xy[i - 1].second) << i;
  }
  EXPECT_EQ(xy.back().first, PlotArea(svg).x1);
}

TEST(MemoryFrontierSvg, CrowdedAndEmpty) {
  // Six labels on one spot: all drawn, all apart.
  std::vector<FrontierPoint> same;
  for (int i = 0; i < 6; ++i)
    same.push_back({512 << 20, 12.5, "target_" + std::to_string(i) + "_with_a_long_name"});
  std::string svg = MemoryFrontierSvg("crowd", {}, same);
  ASSERT_TRUE(ParseXml(svg).ok());
  EXPECT_NE(svg.find("(MiB)"), std::string::npos);
  const auto labels = Elements(svg, "<text class=\"label\"");
  ASSERT_EQ(labels.size(), 6u);
  for (size_t i = 0; i < labels.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      EXPECT_TRUE(std::fabs(D(labels[i], "y") - D(labels[j], "y")) >= 14 ||
                  D(labels[i], "x") != D(labels[j], "x"))
          << i << " on " << j;
  // Nothing at all: still a picture with its axes.
  svg = MemoryFrontierSvg("nothing", {}, {});
  ASSERT_TRUE(ParseXml(svg).ok()) << svg;
  EXPECT_EQ(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find("(0 plans)"), std::string::npos);
}

}  // namespace
}  // namespace foundry
