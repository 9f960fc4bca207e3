// MemoryFrontierSvg (ckpt_budget.h): planned total against recompute FLOPs, hand-written SVG in
// the style of passes/memory_timeline.cc (same fonts, grid, axis units, legend row).
//
// The frontier is drawn as a step line: a budget between two frontier totals can afford only the
// plan at the smaller one, so the recompute stays at that plan's level until the next total and
// drops there; past the last point it stays flat to the right edge. Uniform targets are squares
// with their labels placed greedily, in x order, at the first of a set of spots around the marker
// that overlaps no marker and no label placed before it (a leader line when the spot is away from
// the marker).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>

#include "base/bytes.h"
#include "passes/ckpt_budget.h"
#include "passes/svg_util.h"

namespace foundry {
namespace {

using svg::FormatTick;
using svg::NiceStep;
using svg::Num;
using svg::Unit;
using svg::UnitFor;
using svg::Xml;

struct Box {
  double x0, y0, x1, y1;
  bool Overlaps(const Box& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
  bool Inside(const Box& o) const { return x0 >= o.x0 && x1 <= o.x1 && y0 >= o.y0 && y1 <= o.y1; }
};

// The width a label takes at font-size 12 (sans-serif averages a little over half an em).
double TextWidth(const std::string& s) { return 6.8 * double(s.size()); }

constexpr const char* kFrontierColor = "#1f5fa8";
constexpr const char* kUniformColor = "#c62828";

}  // namespace

std::string MemoryFrontierSvg(const std::string& title, const std::vector<FrontierPoint>& frontier,
                              const std::vector<FrontierPoint>& uniform) {
  const double width = 1100, height = 640;
  const double left = 90, right = 40, top = 60, bottom = 110;
  const double pw = width - left - right, ph = height - top - bottom;

  std::vector<FrontierPoint> front = frontier;
  std::stable_sort(front.begin(), front.end(), [](const FrontierPoint& a, const FrontierPoint& b) {
    return a.total_bytes < b.total_bytes;
  });
  int64_t lo = 0, hi = 0;
  double y_max = 0;
  bool any = false;
  for (const auto* points :
       std::initializer_list<const std::vector<FrontierPoint>*>{&front, &uniform})
    for (const auto& p : *points) {
      lo = any ? std::min(lo, p.total_bytes) : p.total_bytes;
      hi = any ? std::max(hi, p.total_bytes) : p.total_bytes;
      y_max = std::max(y_max, p.recompute_percent);
      any = true;
    }
  const Unit unit = UnitFor(std::max<int64_t>(hi, 1));
  double x_lo = double(lo) / unit.bytes, x_hi = double(hi) / unit.bytes;
  const double pad = std::max((x_hi - x_lo) * 0.06, std::max(x_hi, 1.0) * 0.01);
  const double x_step = NiceStep(x_hi - x_lo + 2 * pad, 7);
  x_lo = std::max(0.0, std::floor((x_lo - pad) / x_step) * x_step);
  x_hi = std::ceil((x_hi + pad) / x_step) * x_step;
  const double y_step = NiceStep(std::max(y_max * 1.1, 1.0), 6);
  const double y_top = std::max(y_step, std::ceil(y_max * 1.1 / y_step) * y_step);
  auto X = [&](int64_t bytes) {
    return left + (double(bytes) / unit.bytes - x_lo) / (x_hi - x_lo) * pw;
  };
  auto Y = [&](double percent) { return top + ph - percent / y_top * ph; };

  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << width / 2 << "\" y=\"28\" text-anchor=\"middle\" font-size=\"17\">"
      << Xml(title) << "</text>\n"
      << "<text x=\"" << width / 2 << "\" y=\"48\" text-anchor=\"middle\" fill=\"#555\">"
      << "the least recompute that fits each budget, and llm-foundry's uniform targets</text>\n";

  // Grid and axes.
  for (double v = 0; v <= y_top + y_step / 2; v += y_step) {
    const double y = Y(v);
    svg << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << Num(y) << "\" y2=\""
        << Num(y) << "\" stroke=\"#ccc\" stroke-width=\"0.5\"/>\n"
        << "<text x=\"" << left - 8 << "\" y=\"" << Num(y + 4) << "\" text-anchor=\"end\">"
        << FormatTick(v) << "</text>\n";
  }
  for (double v = x_lo; v <= x_hi + x_step / 2; v += x_step) {
    const double x = left + (v - x_lo) / (x_hi - x_lo) * pw;
    svg << "<line x1=\"" << Num(x) << "\" x2=\"" << Num(x) << "\" y1=\"" << top << "\" y2=\""
        << top + ph + 5 << "\" stroke=\"#ccc\" stroke-width=\"0.5\"/>\n"
        << "<text x=\"" << Num(x) << "\" y=\"" << top + ph + 20 << "\" text-anchor=\"middle\">"
        << FormatTick(v) << "</text>\n";
  }
  svg << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
      << "\" fill=\"none\" stroke=\"black\"/>\n"
      << "<text x=\"" << left + pw / 2 << "\" y=\"" << top + ph + 42
      << "\" text-anchor=\"middle\">planned total of the training step (" << unit.name
      << ")</text>\n"
      << "<text transform=\"translate(28 " << top + ph / 2
      << ") rotate(-90)\" text-anchor=\"middle\">recompute FLOPs (% of the step)</text>\n";

  // The frontier: step line, then its points. Labels keep off both (`taken`).
  std::vector<Box> taken;
  if (!front.empty()) {
    std::vector<std::pair<double, double>> corners;
    for (size_t i = 0; i < front.size(); ++i) {
      const double x = X(front[i].total_bytes);
      if (i > 0) corners.push_back({x, Y(front[i - 1].recompute_percent)});
      corners.push_back({x, Y(front[i].recompute_percent)});
    }
    corners.push_back({left + pw, Y(front.back().recompute_percent)});
    std::ostringstream pts;
    for (size_t i = 0; i < corners.size(); ++i) {
      pts << (i ? " " : "") << Num(corners[i].first) << "," << Num(corners[i].second);
      if (i == 0) continue;
      const auto [ax, ay] = corners[i - 1];
      const auto [bx, by] = corners[i];
      taken.push_back(
          {std::min(ax, bx) - 2, std::min(ay, by) - 2, std::max(ax, bx) + 2, std::max(ay, by) + 2});
    }
    svg << "<polyline class=\"frontier\" fill=\"none\" stroke=\"" << kFrontierColor
        << "\" stroke-width=\"2\" points=\"" << pts.str() << "\"/>\n";
  }
  for (const auto& p : front) {
    const double x = X(p.total_bytes), y = Y(p.recompute_percent);
    svg << "<circle class=\"frontier\" cx=\"" << Num(x) << "\" cy=\"" << Num(y)
        << "\" r=\"3.5\" fill=\"" << kFrontierColor << "\"><title>"
        << Xml(HumanBytes(p.total_bytes) + ", " + Num(p.recompute_percent) + " % recompute")
        << "</title></circle>\n";
    taken.push_back({x - 4, y - 4, x + 4, y + 4});
  }
  for (const auto& p : uniform) {
    const double x = X(p.total_bytes), y = Y(p.recompute_percent);
    taken.push_back({x - 5, y - 5, x + 5, y + 5});
  }

  // Uniform targets: markers, then labels in x order.
  std::vector<size_t> order(uniform.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return uniform[a].total_bytes < uniform[b].total_bytes;
  });
  const Box plot{left + 2, top + 2, left + pw - 2, top + ph - 2};
  for (size_t i : order) {
    const FrontierPoint& p = uniform[i];
    const double x = X(p.total_bytes), y = Y(p.recompute_percent);
    svg << "<rect class=\"uniform\" x=\"" << Num(x - 4.5) << "\" y=\"" << Num(y - 4.5)
        << "\" width=\"9\" height=\"9\" fill=\"white\" stroke=\"" << kUniformColor
        << "\" stroke-width=\"2\"><title>"
        << Xml(p.label + ": " + HumanBytes(p.total_bytes) + ", " + Num(p.recompute_percent) +
               " % recompute")
        << "</title></rect>\n";
  }
  for (size_t i : order) {
    const FrontierPoint& p = uniform[i];
    const double x = X(p.total_bytes), y = Y(p.recompute_percent);
    const double w = TextWidth(p.label), h = 14;
    // Spots: right, left, then above and below at growing distances, right- then left-aligned.
    std::vector<std::pair<double, double>> spots = {{x + 9, y - h / 2}, {x - 9 - w, y - h / 2}};
    for (int k = 1; k <= 14; ++k)
      for (double dy : {-double(k) * 16 - h / 2, double(k) * 16 - h / 2})
        for (double x0 : {x + 6, x - 6 - w}) spots.push_back({x0, y + dy});
    Box chosen{spots[0].first, spots[0].second, spots[0].first + w, spots[0].second + h};
    bool found = false;
    for (int pass = 0; pass < 2 && !found; ++pass)  // second pass: inside the canvas will do
      for (const auto& [x0, y0] : spots) {
        Box b{x0, y0, x0 + w, y0 + h};
        const Box area = pass == 0 ? plot : Box{2, top, width - 2, height - 2};
        if (!b.Inside(area)) continue;
        if (std::any_of(taken.begin(), taken.end(), [&](const Box& t) { return t.Overlaps(b); }))
          continue;
        chosen = b;
        found = true;
        break;
      }
    taken.push_back(chosen);
    // Away from its marker: a leader to the label's nearer end.
    const double ly = (chosen.y0 + chosen.y1) / 2;
    const double lx = chosen.x0 > x ? chosen.x0 - 1 : chosen.x1 + 1;
    if (std::fabs(ly - y) > h || std::fabs(lx - x) > 14) {
      svg << "<line x1=\"" << Num(x) << "\" y1=\"" << Num(y) << "\" x2=\"" << Num(lx) << "\" y2=\""
          << Num(ly) << "\" stroke=\"" << kUniformColor << "\" stroke-width=\"0.6\"/>\n";
    }
    // A white halo keeps a label legible over grid lines.
    svg << "<text class=\"label\" x=\"" << Num(chosen.x0) << "\" y=\"" << Num(chosen.y1 - 3)
        << "\" fill=\"" << kUniformColor
        << "\" stroke=\"white\" stroke-width=\"3\" paint-order=\"stroke\">" << Xml(p.label)
        << "</text>\n";
  }

  // Legend, one row under the x axis label.
  const double ly = top + ph + 72;
  double lx = left;
  svg << "<line x1=\"" << lx << "\" x2=\"" << lx + 22 << "\" y1=\"" << ly - 4 << "\" y2=\""
      << ly - 4 << "\" stroke=\"" << kFrontierColor << "\" stroke-width=\"2\"/>\n"
      << "<circle cx=\"" << lx + 11 << "\" cy=\"" << ly - 4 << "\" r=\"3.5\" fill=\""
      << kFrontierColor << "\"/>\n";
  const std::string first =
      "frontier: the chosen plan for each budget (" + std::to_string(front.size()) + " plans)";
  svg << "<text x=\"" << lx + 30 << "\" y=\"" << ly << "\">" << Xml(first) << "</text>\n";
  lx += 60 + TextWidth(first);
  svg << "<rect x=\"" << lx + 6 << "\" y=\"" << ly - 8.5 << "\" width=\"9\" height=\"9\" "
      << "fill=\"white\" stroke=\"" << kUniformColor << "\" stroke-width=\"2\"/>\n"
      << "<text x=\"" << lx + 30 << "\" y=\"" << ly << "\">"
      << "llm-foundry uniform targets</text>\n";
  svg << "</svg>\n";
  return svg.str();
}

StatusOr<FrontierPoints> MemoryFrontier(const CkptEvaluator& evaluator, const BudgetResult& first,
                                        CkptSyntax syntax) {
  FrontierPoints out;
  int64_t lo = INT64_MAX, hi = 0;
  for (const CkptEvaluation& e : first.uniform) {
    lo = std::min(lo, e.total_bytes);
    hi = std::max(hi, e.total_bytes);
    if (e.label.find('=') == std::string::npos)
      out.uniform.push_back({e.total_bytes, RecomputePercent(e), e.label});
  }
  constexpr int kBudgets = 12;
  std::vector<CkptEvaluation> chosen;
  for (int k = 0; k <= kBudgets; ++k) {
    BudgetOptions o;
    o.budget_bytes = lo + (hi - lo) * k / kBudgets;
    o.syntax = syntax;
    ASSIGN_OR_RETURN(BudgetResult r, ChooseCheckpointing(evaluator, o));
    chosen.push_back(r.chosen);
  }
  std::sort(chosen.begin(), chosen.end(), [](const auto& a, const auto& b) {
    return a.total_bytes != b.total_bytes ? a.total_bytes < b.total_bytes
                                          : a.flops_recomputed < b.flops_recomputed;
  });
  for (const CkptEvaluation& e : chosen)  // the Pareto set: each cheaper than every smaller one
    if (out.frontier.empty() || RecomputePercent(e) < out.frontier.back().recompute_percent)
      out.frontier.push_back({e.total_bytes, RecomputePercent(e), ""});
  return out;
}

}  // namespace foundry
