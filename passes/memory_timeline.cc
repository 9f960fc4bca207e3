#include "passes/memory_timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "base/bytes.h"
#include "passes/svg_util.h"

namespace foundry {
namespace {

using svg::FormatTick;
using svg::NiceStep;
using svg::Num;
using svg::Unit;
using svg::UnitFor;
using svg::Xml;

const char* PhaseFill(Phase p) {
  switch (p) {
    case Phase::kForward:
      return "#e3eefb";
    case Phase::kBackward:
      return "#fcebdc";
    case Phase::kRecompute:
      return "#efe3f7";
    case Phase::kOptimizer:
      return "#e8e8e8";
  }
  return "#ffffff";
}

// Columns of the plot: [first, last) steps each, represented by the step with the most live bytes.
struct Column {
  int64_t first = 0, last = 0, step = 0;
};
std::vector<Column> Columns(const std::vector<int64_t>& totals, int64_t max_columns) {
  const int64_t n = static_cast<int64_t>(totals.size());
  const int64_t count = std::min(n, max_columns);
  std::vector<Column> cols;
  for (int64_t c = 0; c < count; ++c) {
    Column col{c * n / count, (c + 1) * n / count, c * n / count};
    for (int64_t s = col.first; s < col.last; ++s)
      if (totals[s] > totals[col.step]) col.step = s;
    cols.push_back(col);
  }
  return cols;
}

}  // namespace

TimelineCurve PlainTimelineCurve(const MemoryReport& plain) {
  TimelineCurve curve;
  curve.label = "without checkpointing (peak " + HumanBytes(plain.layout.lower_bound_bytes) + ")";
  for (const auto& s : plain.steps) curve.live_bytes.push_back(s.Total());
  return curve;
}

std::string TimelinePeakLabel(const MemoryReport& report) {
  return "peak " + HumanBytes(report.layout.lower_bound_bytes) + " at step " +
         std::to_string(report.layout.peak_step) + " (node '" + report.layout.peak_node + "')";
}

std::string MemoryTimelineSvg(const MemoryReport& report, const TimelineOptions& options) {
  const double width = options.width, height = options.height;
  const double left = 90, right = 30, top = 70, bottom = 110;
  const double pw = width - left - right, ph = height - top - bottom;

  const std::vector<StepBytes>& steps = report.steps;
  std::vector<int64_t> totals;
  for (const auto& s : steps) totals.push_back(s.Total());
  int64_t n_steps = static_cast<int64_t>(steps.size());
  int64_t max_bytes = report.layout.lower_bound_bytes;
  for (int64_t t : totals) max_bytes = std::max(max_bytes, t);
  for (const auto& c : options.extra_curves) {
    n_steps = std::max<int64_t>(n_steps, c.live_bytes.size());
    for (int64_t b : c.live_bytes) max_bytes = std::max(max_bytes, b);
  }
  n_steps = std::max<int64_t>(n_steps, 1);
  const Unit unit = UnitFor(std::max<int64_t>(max_bytes, 1));
  const double y_step = NiceStep(double(std::max<int64_t>(max_bytes, 1)) / unit.bytes * 1.05, 6);
  const double y_top =
      std::max(y_step, std::ceil(double(max_bytes) / unit.bytes * 1.05 / y_step) * y_step);
  auto X = [&](double step) { return left + step / double(n_steps) * pw; };
  auto Y = [&](double bytes) { return top + ph - bytes / unit.bytes / y_top * ph; };

  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << options.width << "\" height=\""
      << options.height << "\" viewBox=\"0 0 " << options.width << " " << options.height
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";

  std::string title = "live memory of one training step: " + report.model;
  if (!report.dims.empty()) {
    std::string dims;
    for (const auto& [k, v] : report.dims)
      dims += (dims.empty() ? "" : ", ") + k + "=" + std::to_string(v);
    title += " (" + dims + ")";
  }
  svg << "<text x=\"" << width / 2 << "\" y=\"28\" text-anchor=\"middle\" font-size=\"17\">"
      << Xml(title) << "</text>\n"
      << "<text x=\"" << width / 2 << "\" y=\"48\" text-anchor=\"middle\" fill=\"#555\">"
      << Xml("backend " + report.backend + ": arena " + HumanBytes(report.layout.arena_bytes) +
             ", lower bound " + HumanBytes(report.layout.lower_bound_bytes) +
             ", saved for backward " + HumanBytes(report.saved_for_backward_bytes) +
             (report.checkpoint ? " (" + HumanBytes(report.checkpoint->saved_before_bytes) +
                                      " without checkpointing)"
                                : ""))
      << "</text>\n";

  // Phase bands, one rect per run of equal phase, labelled when wide enough.
  for (size_t s = 0; s < steps.size();) {
    size_t e = s;
    while (e < steps.size() && steps[e].phase == steps[s].phase) ++e;
    const double x0 = X(double(s)), x1 = X(double(e));
    svg << "<rect x=\"" << Num(x0) << "\" y=\"" << top << "\" width=\"" << Num(x1 - x0)
        << "\" height=\"" << ph << "\" fill=\"" << PhaseFill(steps[s].phase) << "\"/>\n";
    if (x1 - x0 > 70)
      svg << "<text x=\"" << Num((x0 + x1) / 2) << "\" y=\"" << top + 16
          << "\" text-anchor=\"middle\" fill=\"#777\">" << PhaseName(steps[s].phase) << "</text>\n";
    s = e;
  }

  // Grid and axes.
  for (double v = 0; v <= y_top + y_step / 2; v += y_step) {
    const double y = Y(v * unit.bytes);
    svg << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << Num(y) << "\" y2=\""
        << Num(y) << "\" stroke=\"#ccc\" stroke-width=\"0.5\"/>\n"
        << "<text x=\"" << left - 8 << "\" y=\"" << Num(y + 4) << "\" text-anchor=\"end\">"
        << FormatTick(v) << "</text>\n";
  }
  const double x_step = std::max(1.0, NiceStep(double(n_steps), 8));
  for (double s = 0; s <= double(n_steps) + 0.5; s += x_step) {
    const double x = X(s);
    svg << "<line x1=\"" << Num(x) << "\" x2=\"" << Num(x) << "\" y1=\"" << top + ph << "\" y2=\""
        << top + ph + 5 << "\" stroke=\"black\"/>\n"
        << "<text x=\"" << Num(x) << "\" y=\"" << top + ph + 20 << "\" text-anchor=\"middle\">"
        << FormatTick(s) << "</text>\n";
  }
  svg << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
      << "\" fill=\"none\" stroke=\"black\"/>\n"
      << "<text x=\"" << left + pw / 2 << "\" y=\"" << top + ph + 40
      << "\" text-anchor=\"middle\">schedule step</text>\n"
      << "<text transform=\"translate(24 " << top + ph / 2
      << ") rotate(-90)\" text-anchor=\"middle\">live bytes (" << unit.name << ")</text>\n";

  // The stack, one polygon per kind: its top edge left to right, the kind below it back.
  const std::vector<Column> cols = Columns(totals, static_cast<int64_t>(pw));
  struct Kind {
    const char* name;
    const char* fill;
  };
  const Kind kinds[] = {{"saved activations", "#3b75af"},
                        {"transients", "#ef8636"},
                        {"workspace", "#519e3e"},
                        {"gradients", "#8c564b"}};
  auto level = [&](const StepBytes& s, int k) {
    return k == 0   ? 0
           : k == 1 ? s.saved
           : k == 2 ? s.saved + s.transient
           : k == 3 ? s.saved + s.transient + s.workspace
                    : s.Total();
  };
  const int shown = report.gradients_in_arena ? 4 : 3;  // gradients only when in the arena
  for (int k = 0; k < shown && !cols.empty(); ++k) {
    std::ostringstream pts;
    for (const Column& c : cols) {
      const double y = Y(double(level(steps[c.step], k + 1)));
      pts << Num(X(double(c.first))) << "," << Num(y) << " " << Num(X(double(c.last))) << ","
          << Num(y) << " ";
    }
    for (auto c = cols.rbegin(); c != cols.rend(); ++c) {
      const double y = Y(double(level(steps[c->step], k)));
      pts << Num(X(double(c->last))) << "," << Num(y) << " " << Num(X(double(c->first))) << ","
          << Num(y) << " ";
    }
    svg << "<polygon fill=\"" << kinds[k].fill << "\" fill-opacity=\"0.85\" points=\"" << pts.str()
        << "\"/>\n";
  }

  // Extra curves as dashed lines over their own steps.
  const char* curve_colors[] = {"#c62828", "#6a1b9a", "#00838f"};
  for (size_t i = 0; i < options.extra_curves.size(); ++i) {
    const auto& c = options.extra_curves[i];
    std::ostringstream pts;
    for (const Column& col : Columns(c.live_bytes, static_cast<int64_t>(pw)))
      pts << Num(X(double(col.first))) << "," << Num(Y(double(c.live_bytes[col.step]))) << " "
          << Num(X(double(col.last))) << "," << Num(Y(double(c.live_bytes[col.step]))) << " ";
    svg << "<polyline fill=\"none\" stroke=\"" << curve_colors[i % 3]
        << "\" stroke-width=\"1.5\" stroke-dasharray=\"6 3\" points=\"" << pts.str() << "\"/>\n";
  }

  // The peak: a dashed rule, a dot at the bound, the label on the side with room.
  if (report.layout.peak_step >= 0) {
    const double px = X(double(report.layout.peak_step) + 0.5);
    const double py = Y(double(report.layout.lower_bound_bytes));
    const bool label_left = px > left + pw * 0.6;
    // The rule stops at the dot: below it, the peak step's own column must stay visible.
    svg << "<line x1=\"" << Num(px) << "\" x2=\"" << Num(px) << "\" y1=\"" << top << "\" y2=\""
        << Num(py) << "\" stroke=\"black\" stroke-dasharray=\"3 3\"/>\n"
        << "<circle cx=\"" << Num(px) << "\" cy=\"" << Num(py) << "\" r=\"4\" fill=\"black\"/>\n"
        << "<text x=\"" << Num(label_left ? px - 8 : px + 8) << "\" y=\"" << Num(py - 8)
        << "\" text-anchor=\"" << (label_left ? "end" : "start") << "\" font-weight=\"bold\">"
        << Xml(TimelinePeakLabel(report)) << "</text>\n";
  }

  // Legend, one row under the x axis label.
  struct Entry {
    std::string label, fill;
    bool line;
  };
  std::vector<Entry> legend;
  for (int k = 0; k < shown; ++k) legend.push_back({kinds[k].name, kinds[k].fill, false});
  legend.push_back({"forward", PhaseFill(Phase::kForward), false});
  legend.push_back({"backward", PhaseFill(Phase::kBackward), false});
  for (const auto& s : steps)
    if (s.phase == Phase::kRecompute) {
      legend.push_back({"recompute", PhaseFill(Phase::kRecompute), false});
      break;
    }
  for (size_t i = 0; i < options.extra_curves.size(); ++i)
    legend.push_back({options.extra_curves[i].label, curve_colors[i % 3], true});
  double lx = left;
  const double ly = top + ph + 66;
  for (const auto& e : legend) {
    if (e.line)
      svg << "<line x1=\"" << lx << "\" x2=\"" << lx + 18 << "\" y1=\"" << ly - 4 << "\" y2=\""
          << ly - 4 << "\" stroke=\"" << e.fill
          << "\" stroke-width=\"2\" stroke-dasharray=\"6 3\"/>\n";
    else
      svg << "<rect x=\"" << lx << "\" y=\"" << ly - 10 << "\" width=\"18\" height=\"12\" fill=\""
          << e.fill << "\" stroke=\"#888\" stroke-width=\"0.5\"/>\n";
    svg << "<text x=\"" << lx + 24 << "\" y=\"" << ly << "\">" << Xml(e.label) << "</text>\n";
    lx += 40 + 7.0 * double(e.label.size());
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace foundry
