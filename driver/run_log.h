// RunLog: what a training run tells the person who started it while it runs, and after.
//
//  - The progress line, on the run's log, at every logged step:
//      step 120/4800  loss 3.4121  lr 5.9e-04  1234 tok/s  elapsed 1m02s  ETA 41m10s
//    A step is logged when it is the run's first, a multiple of the log interval (counted on the
//    step number, which continues over --resume), or the run's last. tok/s is over the steps
//    since the previous logged one (each step's own time: the batch, the graph, the optimizer);
//    elapsed is the wall clock since the run's first step began; the ETA is the mean wall time of
//    this run's steps so far times the steps left (saves and logging included, as they will be).
//    On a terminal the line is rewritten in place ("\r", the line, then "erase to the end of the
//    line"), and ended with a newline before any other output and when the run ends (also when it
//    fails: the destructor); elsewhere (a file, a pipe) each logged step is one plain line.
//  - --metrics FILE.jsonl: one JSON object per logged step and per evaluation, written and
//    flushed as the run goes, so that it can be followed with tail -f:
//      {"step":120,"loss":3.41,"lr":0.0006,"grad_norm":null,"tokens_per_s":1234.5,
//       "elapsed_s":62.0,"microbatches":null}
//      {"step":120,"eval_loss":3.52,"eval_perplexity":33.8}
//    A value the run does not know (no clipping: no gradient norm) is null, never a made-up
//    number; every train object has the same keys.
//  - --loss-curve FILE.svg: train loss (every step of this run, plus the logged steps before it
//    that a resumed --metrics file holds) and eval loss points against the step; a log-scale y
//    axis on request.
//  - --report-json's loss history: losses() (every step of this run).
//
// The clock is injected (seconds, monotonic), so the ETA arithmetic is tested without timing.
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "base/status.h"

namespace foundry {

// One training step as the log sees it (from the trainer's StepReport).
struct TrainPoint {
  int64_t step = 0;
  float loss = 0;
  std::optional<double> lr;         // the learning rate the step applied
  std::optional<double> grad_norm;  // the total gradient norm before clipping, when computed
  std::optional<int64_t> microbatches;
  double seconds = 0;  // the step's own time
  int64_t tokens = 0;  // tokens the step trained on
};

struct EvalPoint {
  int64_t step = 0;
  double loss = 0;
  double perplexity = 0;
};

// The default --log-interval for a run of `steps` steps: every step up to 100, else the
// smallest of 2, 5, 10, 20, 50, 100, ... with at most 100 multiples in `steps` (so at most 102
// lines with the first and the last step).
int64_t DefaultLogInterval(int64_t steps);

// "0.4s", "12s", "1m02s", "2h05m10s", "3d04h05m": a duration for people.
std::string FormatDuration(double seconds);

class RunLog {
 public:
  struct Options {
    std::ostream* out = nullptr;  // the progress lines (nullptr: none)
    bool terminal = false;        // `out` is a terminal: rewrite the line in place
    int64_t interval = 1;
    int64_t first_step = 0;  // the run's steps are first_step + 1 .. last_step
    int64_t last_step = 0;
    std::function<double()> clock;  // seconds; default: std::chrono::steady_clock
  };
  explicit RunLog(Options options);
  ~RunLog() { EndLine(); }
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  // --metrics: opened before the first step, when every check has passed. A fresh run replaces
  // the file. A resumed run (`resumed`) continues it: the objects of steps up to first_step are
  // kept (those after it were logged by a run that went past the checkpoint resumed from, and
  // this run logs those steps again), the rest is dropped, and this run appends; a file that is
  // not such a log is an error. The kept train and eval points also go on the loss curve.
  Status OpenMetrics(const std::string& path, bool resumed);

  // The wall clock starts at the first call of Start (the run's first step begins).
  void Start();
  // After each step: recorded; on a logged step the progress line and the metrics object.
  Status AddTrain(const TrainPoint& point);
  // An evaluation after step `step` (in the metrics file and on the curve; its own log line is
  // the caller's, after EndLine).
  Status AddEval(const EvalPoint& point);
  // Ends a rewritten progress line with a newline (a no-op for plain lines or when none is
  // pending): call before printing anything else on the log.
  void EndLine();

  bool Logged(int64_t step) const;
  // This run's steps, in order.
  const std::vector<TrainPoint>& train() const { return train_; }
  std::vector<float> losses() const;
  const std::vector<EvalPoint>& evals() const { return evals_; }
  // The progress line of the last step added (without "\r" or newline).
  const std::string& last_line() const { return last_line_; }

  struct CurveOptions {
    std::string title;     // e.g. the plan's name
    std::string subtitle;  // e.g. "batch 2 x 16, adamw lr 1e-3"
    bool log_scale = false;
    int width = 900;
    int height = 560;
  };
  // The loss curve as an SVG document.
  std::string LossCurveSvg(const CurveOptions& options) const;

 private:
  std::string ProgressLine(const TrainPoint& p, double elapsed) const;
  Status WriteMetrics(const std::string& json_line);

  Options options_;
  std::vector<TrainPoint> train_;
  std::vector<EvalPoint> evals_;
  // (step, loss) from before a resume, read back from the metrics file (logged steps only): for
  // the curve.
  std::vector<std::pair<int64_t, float>> earlier_train_;
  std::vector<std::pair<int64_t, double>> earlier_evals_;
  std::optional<double> start_;
  double interval_seconds_ = 0;  // step time and tokens since the last logged step
  int64_t interval_tokens_ = 0;
  bool line_pending_ = false;
  std::string last_line_;
  std::string metrics_path_;
  std::ofstream metrics_;
};

}  // namespace foundry
