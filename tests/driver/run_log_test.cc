// RunLog (driver/run_log.h) on its own: the progress line's fields and ETA arithmetic under a
// fake clock, the terminal's rewritten line against plain lines, the --metrics objects parsed
// back, a resumed metrics file, and the loss curve read back through its own axes.
#include "driver/run_log.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "tests/support/exec.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/xml_check.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

// A clock the test sets.
struct FakeClock {
  double now = 0;
  std::function<double()> Fn() {
    return [this] { return now; };
  }
};

TrainPoint Point(int64_t step, float loss, double seconds, int64_t tokens = 32) {
  TrainPoint p;
  p.step = step;
  p.loss = loss;
  p.lr = 1e-3;
  p.seconds = seconds;
  p.tokens = tokens;
  return p;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

TEST(RunLogTest, DefaultLogInterval) {
  EXPECT_EQ(DefaultLogInterval(1), 1);
  EXPECT_EQ(DefaultLogInterval(100), 1);
  EXPECT_EQ(DefaultLogInterval(101), 2);  // 101 / 2 = 50 lines
  EXPECT_EQ(DefaultLogInterval(200), 2);
  EXPECT_EQ(DefaultLogInterval(201), 2);  // 100 multiples of 2, and the first and last steps
  EXPECT_EQ(DefaultLogInterval(202), 5);
  EXPECT_EQ(DefaultLogInterval(1000), 10);
  EXPECT_EQ(DefaultLogInterval(1009), 10);
  EXPECT_EQ(DefaultLogInterval(1010), 20);
  EXPECT_EQ(DefaultLogInterval(4800), 50);  // 96 lines
}

TEST(RunLogTest, FormatDuration) {
  EXPECT_EQ(FormatDuration(0), "0.0s");
  EXPECT_EQ(FormatDuration(-3), "0.0s");
  EXPECT_EQ(FormatDuration(9.94), "9.9s");
  EXPECT_EQ(FormatDuration(12.4), "12s");
  EXPECT_EQ(FormatDuration(62), "1m02s");
  EXPECT_EQ(FormatDuration(41 * 60 + 10), "41m10s");
  EXPECT_EQ(FormatDuration(2 * 3600 + 5 * 60 + 10), "2h05m10s");
  EXPECT_EQ(FormatDuration(3 * 86400 + 4 * 3600 + 5 * 60 + 59), "3d04h05m");
}

// Steps 1..7 at an interval of 3: logged 1 (the first), 3, 6 (multiples), 7 (the last). Each
// step takes 2 s of wall clock; tok/s is over the steps since the last logged one.
TEST(RunLogTest, ProgressLineAtAnIntervalWithEta) {
  FakeClock clock;
  std::ostringstream out;
  RunLog log(
      {&out, /*terminal=*/false, /*interval=*/3, /*first_step=*/0, /*last_step=*/7, clock.Fn()});
  clock.now = 100;
  log.Start();
  const double seconds[] = {0.5, 0.5, 1.5, 1, 1, 1, 4};
  for (int64_t s = 1; s <= 7; ++s) {
    clock.now = 100 + 2.0 * s;
    ASSERT_TRUE(log.AddTrain(Point(s, 6.0f - 0.25f * s, seconds[s - 1])).ok());
    EXPECT_EQ(log.Logged(s), s == 1 || s == 3 || s == 6 || s == 7) << s;
  }
  // step 1: 32 tokens / 0.5 s; elapsed 2 s, ETA 2 / 1 * 6 = 12 s.
  // step 3: steps 2-3: 64 tokens / 2.0 s = 32; elapsed 6 s, ETA 6 / 3 * 4 = 8 s.
  // step 6: steps 4-6: 96 / 3 s = 32; elapsed 12 s, ETA 12 / 6 * 1 = 2 s.
  // step 7: 32 / 4 s = 8; ETA 0.
  EXPECT_EQ(Lines(out.str()),
            (std::vector<std::string>{
                "step 1/7  loss 5.7500  lr 1.0e-03  64 tok/s  elapsed 2.0s  ETA 12s",
                "step 3/7  loss 5.2500  lr 1.0e-03  32 tok/s  elapsed 6.0s  ETA 8.0s",
                "step 6/7  loss 4.5000  lr 1.0e-03  32 tok/s  elapsed 12s  ETA 2.0s",
                "step 7/7  loss 4.2500  lr 1.0e-03  8 tok/s  elapsed 14s  ETA 0.0s"}));
  EXPECT_EQ(log.losses(), (std::vector<float>{5.75f, 5.5f, 5.25f, 5.0f, 4.75f, 4.5f, 4.25f}));
}

// A resumed run (steps 101..4900) at step 220, 62 s in: 120 steps done in 62 s, 4680 left,
// ETA 62 / 120 * 4680 = 2418 s. An unknown lr is left out; a known gradient norm is shown.
TEST(RunLogTest, EtaOfAResumedRunCountsThisRunsStepsOnly) {
  FakeClock clock;
  std::ostringstream out;
  RunLog log({&out, false, /*interval=*/20, /*first_step=*/100, /*last_step=*/4900, clock.Fn()});
  log.Start();
  for (int64_t s = 101; s <= 220; ++s) {
    clock.now = 62.0 * (s - 100) / 120;
    TrainPoint p = Point(s, 3.4121f, 0.5, 1234 / 2);
    p.lr = std::nullopt;
    p.grad_norm = 0.8125;
    ASSERT_TRUE(log.AddTrain(p).ok());
  }
  EXPECT_EQ(log.last_line(),
            "step 220/4900  loss 3.4121  grad_norm 0.812  1234 tok/s  elapsed 1m02s  ETA 40m18s");
}

// On a terminal each line replaces the last ("\r", the line, erase to the end of the line); a
// newline ends it before other output and at the last step, and the destructor ends a line a
// failed run leaves pending.
TEST(RunLogTest, TerminalRewritesTheLine) {
  FakeClock clock;
  std::ostringstream out;
  {
    RunLog log({&out, /*terminal=*/true, 1, 0, 3, clock.Fn()});
    log.Start();
    ASSERT_TRUE(log.AddTrain(Point(1, 5, 1)).ok());
    ASSERT_TRUE(log.AddTrain(Point(2, 4, 1)).ok());
    log.EndLine();
    out << "checkpoint x\n";
    log.EndLine();  // nothing pending: nothing printed
    ASSERT_TRUE(log.AddTrain(Point(3, 3, 1)).ok());
  }
  const std::string tail = "  lr 1.0e-03  32 tok/s  elapsed 0.0s  ETA 0.0s";
  EXPECT_EQ(out.str(), "\rstep 1/3  loss 5.0000" + tail + "\x1b[K" + "\rstep 2/3  loss 4.0000" +
                           tail + "\x1b[K\n" +
                           "checkpoint x\n"
                           "\rstep 3/3  loss 3.0000" +
                           tail + "\x1b[K\n");

  std::ostringstream failed;
  {
    RunLog log({&failed, true, 1, 0, 5, clock.Fn()});
    log.Start();
    ASSERT_TRUE(log.AddTrain(Point(1, 5, 1)).ok());
  }  // the run stopped at step 1 of 5
  EXPECT_EQ(failed.str(), "\rstep 1/5  loss 5.0000" + tail + "\x1b[K\n");

  std::ostringstream plain;
  {
    RunLog log({&plain, false, 1, 0, 2, clock.Fn()});
    log.Start();
    ASSERT_TRUE(log.AddTrain(Point(1, 5, 1)).ok());
    ASSERT_TRUE(log.AddTrain(Point(2, 4, 1)).ok());
  }
  EXPECT_EQ(plain.str(), "step 1/2  loss 5.0000" + tail + "\nstep 2/2  loss 4.0000" + tail + "\n");
}

class RunLogFileTest : public ScratchDirTest {};

// Every key of every object, one object per logged step (1, 2, 4 and the last, 5, at interval
// 2) and one per evaluation; values equal to what was added, null where not known.
// The points="..." of the polyline of class `cls`, found without std::regex (whose matcher
// recurses once per character: a 100,000-step curve overflows the stack under ASan).
std::string PointsOf(const std::string& svg, const std::string& cls) {
  const size_t at = svg.find("class=\"" + cls + "\"");
  if (at == std::string::npos) return "";
  const size_t end = svg.find('>', at);
  const size_t p = svg.find("points=\"", at);
  if (p == std::string::npos || p > end) return "";
  const size_t q = svg.find('"', p + 8);
  return svg.substr(p + 8, q - p - 8);
}

TEST_F(RunLogFileTest, MetricsObjectsParseBack) {
  Write("m.jsonl", "an older run's file, replaced\n");
  FakeClock clock;
  RunLog log({nullptr, false, 2, 0, 5, clock.Fn()});
  ASSERT_TRUE(log.OpenMetrics(Path("m.jsonl"), /*resumed=*/false).ok());
  log.Start();
  std::vector<TrainPoint> points;
  for (int64_t s = 1; s <= 5; ++s) {
    clock.now = 1.5 * s;
    TrainPoint p = Point(s, 5.0f / s, 0.25 * s, 64);
    if (s == 4) p.grad_norm = 1.75, p.microbatches = 4;
    points.push_back(p);
    ASSERT_TRUE(log.AddTrain(p).ok());
    if (s == 4) ASSERT_TRUE(log.AddEval({4, 2.5, std::exp(2.5)}).ok());
  }
  const std::vector<std::string> lines = Lines(ReadWholeFile(Path("m.jsonl")));
  ASSERT_EQ(lines.size(), 5u) << ReadWholeFile(Path("m.jsonl"));
  const std::vector<std::string> train_keys = {
      "step", "loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s", "microbatches"};
  // tok/s over the steps since the last logged one: step 2 alone, then 3-4, then 5.
  const std::map<int64_t, double> tok_s = {
      {1, 64 / 0.25}, {2, 64 / 0.5}, {4, 128 / (0.75 + 1.0)}, {5, 64 / 1.25}};
  int train_lines = 0;
  for (const std::string& line : lines) {
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(line);
    if (j.contains("eval_loss")) {
      EXPECT_EQ(line, "{\"step\":4,\"eval_loss\":2.5,\"eval_perplexity\":" +
                          nlohmann::json(std::exp(2.5)).dump() + "}");
      continue;
    }
    ++train_lines;
    std::vector<std::string> keys;
    for (const auto& [k, v] : j.items()) keys.push_back(k);
    EXPECT_EQ(keys, train_keys) << line;
    const int64_t s = j.at("step").get<int64_t>();
    const TrainPoint& p = points[s - 1];
    EXPECT_EQ(j.at("loss").get<float>(), p.loss);
    EXPECT_EQ(j.at("lr").get<double>(), 1e-3);
    EXPECT_EQ(j.at("tokens_per_s").get<double>(), tok_s.at(s)) << s;
    EXPECT_EQ(j.at("elapsed_s").get<double>(), 1.5 * s);
    if (s == 4) {
      EXPECT_EQ(j.at("grad_norm").get<double>(), 1.75);
      EXPECT_EQ(j.at("microbatches").get<int64_t>(), 4);
      EXPECT_EQ(lines[3].rfind("{\"step\":4,\"eval_loss\":", 0), 0u);  // after step 4's
    } else {
      EXPECT_TRUE(j.at("grad_norm").is_null()) << line;
      EXPECT_TRUE(j.at("microbatches").is_null()) << line;
    }
  }
  EXPECT_EQ(train_lines, 4);
}

// A resumed run keeps the objects up to the step it resumes at, drops the later ones (logged by
// the run that went past the checkpoint) and appends; they also go on the loss curve.
TEST_F(RunLogFileTest, AResumedRunContinuesTheMetricsFile) {
  std::string before;
  for (int s = 1; s <= 6; ++s) {
    before += "{\"step\":" + std::to_string(s) + ",\"loss\":" + std::to_string(6 - s * 0.5) +
              ",\"lr\":0.001}\n";
    if (s % 2 == 0) before += "{\"step\":" + std::to_string(s) + ",\"eval_loss\":4.0}\n";
  }
  Write("m.jsonl", before);
  FakeClock clock;
  RunLog log({nullptr, false, 1, /*first_step=*/4, /*last_step=*/5, clock.Fn()});
  ASSERT_TRUE(log.OpenMetrics(Path("m.jsonl"), /*resumed=*/true).ok());
  log.Start();
  ASSERT_TRUE(log.AddTrain(Point(5, 3.0f, 1)).ok());
  const std::vector<std::string> lines = Lines(ReadWholeFile(Path("m.jsonl")));
  const std::vector<std::string> old = Lines(before);
  ASSERT_EQ(lines.size(), 7u);  // steps 1-4 and the evals at 2 and 4, then step 5
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(lines[i], old[i]);
  EXPECT_EQ(nlohmann::json::parse(lines[6]).at("step"), 5);
  // The curve: steps 1-4 from the file, 5 from this run; the two evals.
  const std::string svg = log.LossCurveSvg({});
  auto count = [](const std::string& points) {
    std::istringstream in(points);
    size_t n = 0;
    for (std::string pt; in >> pt;) ++n;
    return n;
  };
  EXPECT_EQ(count(PointsOf(svg, "train")), 5u);
  EXPECT_EQ(count(PointsOf(svg, "eval")), 2u);

  Write("bad.jsonl", "{\"step\":1}\nnot json\n");
  RunLog bad({nullptr, false, 1, 1, 2, clock.Fn()});
  Status st = bad.OpenMetrics(Path("bad.jsonl"), true);
  EXPECT_EQ(st.message(), "--metrics " + Path("bad.jsonl") +
                              ": line 2 is not a JSON object with an integer \"step\" (is it a "
                              "--metrics file?); give another file, or move this one away");
  EXPECT_EQ(ReadWholeFile(Path("bad.jsonl")), "{\"step\":1}\nnot json\n");  // untouched
}

// The points of a polyline (class `cls`) mapped back to values through the picture's own tick
// labels (two ticks fix each axis: linear, or linear in log10 for a log-scale y).
std::vector<std::pair<double, double>> ReadBack(const std::string& svg, const std::string& cls,
                                                bool log_y) {
  auto ticks = [&](const std::string& axis, bool use_x) {
    std::vector<std::pair<double, double>> t;  // (pixel, value)
    std::regex re("<text class=\"" + axis + "\" x=\"([-0-9.]+)\" y=\"([-0-9.]+)\"[^>]*>([^<]*)<");
    for (std::sregex_iterator it(svg.begin(), svg.end(), re), end; it != end; ++it)
      t.push_back(
          {std::stod((*it)[use_x ? 1 : 2].str()) - (use_x ? 0 : 4), std::stod((*it)[3].str())});
    return t;
  };
  const auto xt = ticks("xtick", true), yt = ticks("ytick", false);
  EXPECT_GE(xt.size(), 2u);
  EXPECT_GE(yt.size(), 2u);
  if (xt.size() < 2 || yt.size() < 2) return {};
  auto f = [&](double v) { return log_y ? std::log10(v) : v; };
  auto inv = [&](double v) { return log_y ? std::pow(10.0, v) : v; };
  const auto &x0 = xt.front(), &x1 = xt.back(), &y0 = yt.front(), &y1 = yt.back();
  const std::string points = PointsOf(svg, cls);
  EXPECT_FALSE(points.empty()) << cls;
  std::vector<std::pair<double, double>> values;
  std::istringstream in(points);
  for (std::string pt; in >> pt;) {
    const double px = std::stod(pt.substr(0, pt.find(','))),
                 py = std::stod(pt.substr(pt.find(',') + 1));
    values.push_back({x0.second + (px - x0.first) / (x1.first - x0.first) * (x1.second - x0.second),
                      inv(f(y0.second) + (py - y0.first) / (y1.first - y0.first) *
                                             (f(y1.second) - f(y0.second)))});
  }
  return values;
}

TEST_F(RunLogFileTest, LossCurveReadsBackThroughItsAxes) {
  for (bool log_y : {false, true}) {
    FakeClock clock;
    RunLog log({nullptr, false, 1, 0, 40, clock.Fn()});
    log.Start();
    std::vector<float> losses;
    for (int64_t s = 1; s <= 40; ++s) {
      losses.push_back(static_cast<float>(6.0 * std::exp(-0.05 * s) + 0.5));
      ASSERT_TRUE(log.AddTrain(Point(s, losses.back(), 1)).ok());
      if (s % 10 == 0) ASSERT_TRUE(log.AddEval({s, losses.back() + 0.25, 0}).ok());
    }
    RunLog::CurveOptions o;
    o.title = "training loss: m.plan (from a & b <model>.onnx)";
    o.subtitle = "batch 2 x 16";
    o.log_scale = log_y;
    const std::string svg = log.LossCurveSvg(o);
    StatusOr<std::vector<std::string>> elements = ParseXml(svg);
    ASSERT_TRUE(elements.ok()) << elements.status().message() << "\n" << svg;
    EXPECT_NE(svg.find("a &amp; b &lt;model&gt;.onnx"), std::string::npos);
    EXPECT_EQ(std::count(elements->begin(), elements->end(), "polyline"), 2);
    EXPECT_EQ(std::count(elements->begin(), elements->end(), "circle"), 5);  // 4 + legend
    EXPECT_EQ(svg.find("(log scale)") != std::string::npos, log_y);
    // One decimal of a pixel on a ~430-pixel axis: values back to within 0.2 % of the range.
    const auto train = ReadBack(svg, "train", log_y);
    ASSERT_EQ(train.size(), 40u);
    for (size_t i = 0; i < train.size(); ++i) {
      EXPECT_NEAR(train[i].first, double(i + 1), 0.05) << i;
      EXPECT_NEAR(train[i].second, losses[i], 0.01 * (log_y ? losses[i] : 1)) << i << " " << log_y;
    }
    const auto evals = ReadBack(svg, "eval", log_y);
    ASSERT_EQ(evals.size(), 4u);
    for (size_t k = 0; k < 4; ++k) {
      EXPECT_NEAR(evals[k].first, 10.0 * (k + 1), 0.05);
      EXPECT_NEAR(evals[k].second, losses[10 * (k + 1) - 1] + 0.25, 0.01 * (log_y ? 5 : 1));
    }
  }
}

// Past one point per pixel column, each column's mean: 100,000 steps fit the plot's width.
TEST_F(RunLogFileTest, LongRunsAreDrawnOnePointPerColumn) {
  FakeClock clock;
  RunLog log({nullptr, false, 1000, 0, 100000, clock.Fn()});
  log.Start();
  for (int64_t s = 1; s <= 100000; ++s) ASSERT_TRUE(log.AddTrain(Point(s, 3.0f, 0.01)).ok());
  const std::string svg = log.LossCurveSvg({});
  ASSERT_TRUE(ParseXml(svg).ok());
  const auto train = ReadBack(svg, "train", false);
  EXPECT_LE(train.size(), 900u - 80 - 30 + 1);
  EXPECT_GE(train.size(), 700u);
  for (const auto& [x, y] : train) EXPECT_NEAR(y, 3.0, 0.01);
}

}  // namespace
}  // namespace foundry
