#include "driver/run_log.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/file_util.h"
#include "passes/svg_util.h"

namespace foundry {

namespace {

std::string Format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <typename T>
nlohmann::ordered_json OrNull(const std::optional<T>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

}  // namespace

int64_t DefaultLogInterval(int64_t steps) {
  if (steps <= 100) return 1;
  for (int64_t p = 1;; p *= 10)
    for (int64_t m : {1, 2, 5})
      if (steps / (m * p) <= 100) return m * p;  // logged: multiples of m * p (+ first, last)
}

std::string FormatDuration(double seconds) {
  if (!(seconds > 0)) seconds = 0;
  const int64_t s = static_cast<int64_t>(std::llround(std::min(seconds, 9e15)));
  char buf[64];
  if (seconds < 9.95)
    std::snprintf(buf, sizeof buf, "%.1fs", seconds);
  else if (s < 60)
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  else if (s < 86400)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm%02llds", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lldd%02lldh%02lldm", static_cast<long long>(s / 86400),
                  static_cast<long long>(s / 3600 % 24), static_cast<long long>(s / 60 % 60));
  return buf;
}

RunLog::RunLog(Options options) : options_(std::move(options)) {
  if (!options_.clock) options_.clock = SteadySeconds;
  if (options_.interval < 1) options_.interval = 1;
}

Status RunLog::OpenMetrics(const std::string& path, bool resumed) {
  metrics_path_ = path;
  const std::string named = "--metrics " + path;
  struct stat st {};
  const bool regular = ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  std::ios::openmode mode = std::ios::out | std::ios::trunc;
  if (resumed && regular) {
    std::ifstream file(path, std::ios::binary);
    std::ostringstream whole;
    whole << file.rdbuf();
    if (!file) return Error(named + ": cannot read it: " + std::strerror(errno));
    const std::string text = whole.str();
    std::istringstream in(text);
    std::string line, kept;
    for (int64_t n = 1; std::getline(in, line); ++n) {
      if (line.empty()) continue;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer())
        return Error(named + ": line " + std::to_string(n) +
                     " is not a JSON object with an integer \"step\" (is it a --metrics file?); "
                     "give another file, or move this one away");
      const int64_t step = j["step"].get<int64_t>();
      if (step > options_.first_step) continue;
      kept += line + "\n";
      if (j.contains("loss") && j["loss"].is_number())
        earlier_train_.push_back({step, j["loss"].get<float>()});
      if (j.contains("eval_loss") && j["eval_loss"].is_number())
        earlier_evals_.push_back({step, j["eval_loss"].get<double>()});
    }
    if (kept.size() != text.size()) RETURN_IF_ERROR(WriteFileAtomic(path, kept));
    mode = std::ios::out | std::ios::app;
  }
  metrics_.open(path, mode);
  if (!metrics_) return Error(named + ": cannot open it for writing: " + std::strerror(errno));
  return Status::Ok();
}

void RunLog::Start() {
  if (!start_) start_ = options_.clock();
}

bool RunLog::Logged(int64_t step) const {
  return step == options_.first_step + 1 || step % options_.interval == 0 ||
         step == options_.last_step;
}

std::string RunLog::ProgressLine(const TrainPoint& p, double elapsed) const {
  const int64_t done = p.step - options_.first_step;
  const int64_t left = options_.last_step - p.step;
  const double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(left) : 0;
  std::string line = "step " + std::to_string(p.step) + "/" + std::to_string(options_.last_step) +
                     "  loss " + Format("%.4f", p.loss);
  if (p.lr) line += "  lr " + Format("%.1e", *p.lr);
  if (p.grad_norm) line += "  grad_norm " + Format("%.3g", *p.grad_norm);
  const double tok_s = interval_seconds_ > 0 ? interval_tokens_ / interval_seconds_ : 0;
  line += "  " + Format("%.0f", tok_s) + " tok/s  elapsed " + FormatDuration(elapsed) + "  ETA " +
          FormatDuration(eta);
  return line;
}

Status RunLog::AddTrain(const TrainPoint& p) {
  Start();
  train_.push_back(p);
  interval_seconds_ += p.seconds;
  interval_tokens_ += p.tokens;
  if (!Logged(p.step)) return Status::Ok();
  const double elapsed = options_.clock() - *start_;
  last_line_ = ProgressLine(p, elapsed);
  if (options_.out) {
    std::ostream& out = *options_.out;
    if (options_.terminal) {
      out << "\r" << last_line_ << "\x1b[K";
      line_pending_ = true;
      if (p.step == options_.last_step) EndLine();
    } else {
      out << last_line_ << "\n";
    }
    out << std::flush;
  }
  Status st = Status::Ok();
  if (metrics_.is_open()) {
    nlohmann::ordered_json j;
    j["step"] = p.step;
    j["loss"] = p.loss;
    j["lr"] = OrNull(p.lr);
    j["grad_norm"] = OrNull(p.grad_norm);
    j["tokens_per_s"] = interval_seconds_ > 0 ? interval_tokens_ / interval_seconds_ : 0.0;
    j["elapsed_s"] = elapsed;
    j["microbatches"] = OrNull(p.microbatches);
    st = WriteMetrics(j.dump());
  }
  interval_seconds_ = 0;
  interval_tokens_ = 0;
  return st;
}

Status RunLog::AddEval(const EvalPoint& p) {
  evals_.push_back(p);
  if (!metrics_.is_open()) return Status::Ok();
  nlohmann::ordered_json j;
  j["step"] = p.step;
  j["eval_loss"] = p.loss;
  j["eval_perplexity"] = p.perplexity;
  return WriteMetrics(j.dump());
}

Status RunLog::WriteMetrics(const std::string& json_line) {
  metrics_ << json_line << "\n" << std::flush;
  if (!metrics_)
    return Error("--metrics " + metrics_path_ + ": cannot write: " + std::strerror(errno));
  return Status::Ok();
}

void RunLog::EndLine() {
  if (!line_pending_) return;
  line_pending_ = false;
  if (options_.out) *options_.out << "\n" << std::flush;
}

std::vector<float> RunLog::losses() const {
  std::vector<float> l;
  l.reserve(train_.size());
  for (const TrainPoint& p : train_) l.push_back(p.loss);
  return l;
}

// ---- the loss curve ----

namespace {

using svg::FormatTick;
using svg::NiceStep;
using svg::Num;
using svg::Xml;

// Ticks of a log-scale axis over [lo, hi] (values, lo > 0): 1, 2, 5 times powers of ten, or
// every 1..9 multiple when those give fewer than four.
std::vector<double> LogTicks(double lo, double hi) {
  for (const std::vector<double>& ms :
       {std::vector<double>{1, 2, 5}, std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9}}) {
    std::vector<double> ticks;
    for (int e = static_cast<int>(std::floor(std::log10(lo))) - 1;
         e <= static_cast<int>(std::ceil(std::log10(hi))); ++e)
      for (double m : ms) {
        const double v = m * std::pow(10.0, e);
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ticks.push_back(v);
      }
    if (ticks.size() >= 4 || ms.size() == 9) return ticks;
  }
  return {};
}

using Points = std::vector<std::pair<double, double>>;  // (step, loss)

// The plot's area in the picture and the ranges its axes span: x in steps, y in the axis's own
// scale (log10 of the loss on a log-scale axis).
struct CurveFrame {
  static constexpr int left = 80, right = 30, top = 70, bottom = 60;
  int pw = 0, ph = 0;  // the plot's width and height in pixels
  bool log_scale = false;
  double x_lo = 0, x_hi = 1, a_lo = 0, a_hi = 1;

  double ToAxis(double v) const { return log_scale ? std::log10(v) : v; }
  double X(double step) const { return left + (step - x_lo) / (x_hi - x_lo) * pw; }
  double Y(double v) const {
    if (log_scale && !(v > 0)) return double(top + ph);
    return top + ph - (ToAxis(v) - a_lo) / (a_hi - a_lo) * ph;
  }
};

// The ranges that hold every point (on a log scale, every positive one), y with 5% room above
// and below.
CurveFrame FitFrame(const RunLog::CurveOptions& o, const Points& train, const Points& evals) {
  CurveFrame f;
  f.pw = o.width - f.left - f.right;
  f.ph = o.height - f.top - f.bottom;
  f.log_scale = o.log_scale;
  double y_lo = 0, y_hi = 1;
  bool any = false;
  auto extend = [&](double x, double y) {
    if (!any) f.x_lo = f.x_hi = x, y_lo = y_hi = y;
    any = true;
    f.x_lo = std::min(f.x_lo, x), f.x_hi = std::max(f.x_hi, x);
    y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
  };
  for (const Points* points : {&train, &evals})
    for (const auto& [x, y] : *points)
      if (!o.log_scale || y > 0) extend(x, y);
  if (!any) y_lo = o.log_scale ? 1 : 0, y_hi = o.log_scale ? 10 : 1;
  if (f.x_hi - f.x_lo < 1) f.x_lo -= 1, f.x_hi += 1;
  f.x_lo = std::max(0.0, f.x_lo);

  f.a_lo = f.ToAxis(y_lo), f.a_hi = f.ToAxis(y_hi);
  if (f.a_hi - f.a_lo < 1e-6) {
    const double pad = o.log_scale ? 0.05 : std::max(0.05, std::fabs(f.a_hi) * 0.05);
    f.a_lo -= pad, f.a_hi += pad;
  }
  const double pad = (f.a_hi - f.a_lo) * 0.05;
  f.a_lo -= pad, f.a_hi += pad;
  if (!o.log_scale && y_lo >= 0) f.a_lo = std::max(f.a_lo, 0.0);
  return f;
}

void WriteTitles(std::ostream& s, const RunLog::CurveOptions& o) {
  s << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << o.width << "\" height=\"" << o.height
    << "\" viewBox=\"0 0 " << o.width << " " << o.height
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << o.width / 2 << "\" y=\"28\" text-anchor=\"middle\" font-size=\"17\">"
    << Xml(o.title) << "</text>\n"
    << "<text x=\"" << o.width / 2 << "\" y=\"48\" text-anchor=\"middle\" fill=\"#555\">"
    << Xml(o.subtitle) << "</text>\n";
}

// Grid, ticks and labels. The tick labels carry class="ytick"/"xtick" so that a reader (the
// tests) can map a point back to its value through the axis, as a person would.
void WriteAxes(std::ostream& s, const CurveFrame& f) {
  const int left = f.left, top = f.top, pw = f.pw, ph = f.ph;
  std::vector<double> y_ticks;
  if (f.log_scale) {
    y_ticks = LogTicks(std::pow(10.0, f.a_lo), std::pow(10.0, f.a_hi));
  } else {
    const double step = NiceStep(f.a_hi - f.a_lo, 6);
    for (double v = std::ceil(f.a_lo / step) * step; v <= f.a_hi + step * 1e-9; v += step)
      y_ticks.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
  }
  for (double v : y_ticks) {
    const double y = f.Y(v);
    s << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << Num(y) << "\" y2=\""
      << Num(y) << "\" stroke=\"#ddd\" stroke-width=\"0.5\"/>\n"
      << "<text class=\"ytick\" x=\"" << left - 8 << "\" y=\"" << Num(y + 4)
      << "\" text-anchor=\"end\">" << FormatTick(v) << "</text>\n";
  }
  const double x_step = std::max(1.0, NiceStep(f.x_hi - f.x_lo, 8));
  for (double v = std::ceil(f.x_lo / x_step) * x_step; v <= f.x_hi + 1e-9; v += x_step) {
    const double x = f.X(v);
    s << "<line x1=\"" << Num(x) << "\" x2=\"" << Num(x) << "\" y1=\"" << top << "\" y2=\""
      << top + ph << "\" stroke=\"#eee\" stroke-width=\"0.5\"/>\n"
      << "<line x1=\"" << Num(x) << "\" x2=\"" << Num(x) << "\" y1=\"" << top + ph << "\" y2=\""
      << top + ph + 5 << "\" stroke=\"black\"/>\n"
      << "<text class=\"xtick\" x=\"" << Num(x) << "\" y=\"" << top + ph + 20
      << "\" text-anchor=\"middle\">" << FormatTick(v) << "</text>\n";
  }
  s << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"black\"/>\n"
    << "<text x=\"" << left + pw / 2 << "\" y=\"" << top + ph + 42
    << "\" text-anchor=\"middle\">step</text>\n"
    << "<text transform=\"translate(22 " << top + ph / 2
    << ") rotate(-90)\" text-anchor=\"middle\">loss" << (f.log_scale ? " (log scale)" : "")
    << "</text>\n";
}

// Train loss: one point per step up to one per pixel column, then column means. Eval loss: a
// line through its points, each marked.
void WriteCurves(std::ostream& s, const CurveFrame& f, const Points& train, const Points& evals) {
  std::ostringstream pts;
  const bool per_column = train.size() > static_cast<size_t>(f.pw);
  auto column = [&](double step) { return static_cast<int64_t>(f.X(step) - f.left); };
  for (size_t i = 0; i < train.size();) {
    size_t j = i + 1;
    double sx = train[i].first, sy = train[i].second;
    while (per_column && j < train.size() && column(train[j].first) == column(train[i].first))
      sx += train[j].first, sy += train[j].second, ++j;
    const double n = static_cast<double>(j - i);
    pts << (i ? " " : "") << Num(f.X(sx / n)) << "," << Num(f.Y(sy / n));
    i = j;
  }
  if (!train.empty())
    s << "<polyline class=\"train\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" "
         "stroke-linejoin=\"round\" points=\""
      << pts.str() << "\"/>\n";
  if (evals.empty()) return;
  std::ostringstream ep;
  for (size_t i = 0; i < evals.size(); ++i)
    ep << (i ? " " : "") << Num(f.X(evals[i].first)) << "," << Num(f.Y(evals[i].second));
  s << "<polyline class=\"eval\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"1.5\" "
       "points=\""
    << ep.str() << "\"/>\n";
  for (const auto& [x, y] : evals)
    s << "<circle cx=\"" << Num(f.X(x)) << "\" cy=\"" << Num(f.Y(y))
      << "\" r=\"3.5\" fill=\"#d62728\"/>\n";
}

// Legend, top right inside the plot.
void WriteLegend(std::ostream& s, const CurveFrame& f, bool with_eval) {
  const int lx = f.left + f.pw - 130, ly = f.top + 20;
  s << "<rect x=\"" << lx - 8 << "\" y=\"" << ly - 14 << "\" width=\"130\" height=\""
    << (with_eval ? 44 : 24) << "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#ccc\"/>\n"
    << "<line x1=\"" << lx << "\" x2=\"" << lx + 18 << "\" y1=\"" << ly - 4 << "\" y2=\"" << ly - 4
    << "\" stroke=\"#1f77b4\" stroke-width=\"2\"/>\n"
    << "<text x=\"" << lx + 24 << "\" y=\"" << ly << "\">train loss</text>\n";
  if (with_eval)
    s << "<line x1=\"" << lx << "\" x2=\"" << lx + 18 << "\" y1=\"" << ly + 16 << "\" y2=\""
      << ly + 16 << "\" stroke=\"#d62728\" stroke-width=\"2\"/>\n"
      << "<circle cx=\"" << lx + 9 << "\" cy=\"" << ly + 16 << "\" r=\"3.5\" fill=\"#d62728\"/>\n"
      << "<text x=\"" << lx + 24 << "\" y=\"" << ly + 20 << "\">eval loss</text>\n";
}

}  // namespace

std::string RunLog::LossCurveSvg(const CurveOptions& o) const {
  // The train points: earlier logged steps, then every step of this run; past one point per
  // pixel column, each column's mean step and mean loss.
  Points train;
  for (const auto& [step, loss] : earlier_train_)
    if (train_.empty() || step < train_.front().step) train.push_back({double(step), loss});
  for (const TrainPoint& p : train_) train.push_back({double(p.step), p.loss});
  Points evals;
  for (const auto& [step, loss] : earlier_evals_) evals.push_back({double(step), loss});
  for (const EvalPoint& e : evals_) evals.push_back({double(e.step), e.loss});

  const CurveFrame frame = FitFrame(o, train, evals);
  std::ostringstream s;
  WriteTitles(s, o);
  WriteAxes(s, frame);
  WriteCurves(s, frame, train, evals);
  WriteLegend(s, frame, !evals.empty());
  s << "</svg>\n";
  return s.str();
}

}  // namespace foundry
