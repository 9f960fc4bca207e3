// Train(const RunRequest&): what foundry-run does with a compiled plan between parsing its options
// and exiting, as one library call, so that a multi-process launcher or a Python binding trains
// exactly as the CLI does. RunForward(const ForwardRequest&): the same for foundry-run --forward.
//
// Train's steps, in the order their errors are reported (each an error value; nothing here exits,
// nothing is printed but to `log`):
//   1. the plan is loaded and the trainer created (runtime/trainer.h), then resumed from
//      `resume_dir`;
//   2. before the first step, so a long run never ends in an error it could have given at once:
//      every output (the save folder, the report file, the first step's dumps, --metrics,
//      --loss-curve, --save-folder) is declared and checked (base/output_set.h: not an input, not
//      inside the --resume save, not another output, its folder writable), and the step count does
//      not overflow;
//   3. the run's header on `log`, then the steps, a progress line at each logged one
//      (driver/run_log.h; the high-water marks of the backend's memory are reset as they start),
//      a periodic checkpoint after each --save-interval-th;
//   4. planned against measured memory per class (RunMemory) on `log`, then the dumps, the save,
//      the report and the loss curve committed together: a run that fails anywhere leaves none
//      of them (but keeps its periodic checkpoints and what --metrics logged).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "base/memory_class.h"
#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"
#include "runtime/evaluator.h"
#include "runtime/trainer.h"

namespace foundry {

struct RunRequest {
  std::string plan;  // PREFIX of foundry-compile's -o, or PREFIX.plan
  TrainerOptions trainer;
  int64_t steps = 1;
  std::string resume_dir;   // the save to continue (a --save-folder: its latest, ResumeTarget)
  std::string save_dir;     // "" = no save
  std::string report_json;  // "" = no report file
  std::ostream* log = nullptr;
  // Time each node and print where a step's time goes, by op type (steps 2..N when N > 1: the
  // first touches the arena's pages). CPU backend only.
  bool profile = false;
  // CPU threads of the kernels and of OpenBLAS (kernels/cpu/parallel.h: SetAllCpuThreads); the
  // results do not depend on it.
  int threads = 1;
  // Eval (runtime/evaluator.h) on `eval.data_path` when set: before the first step with
  // eval_first, after every `eval_interval` steps (0: none between), and after the last step
  // (with steps = 0: once, foundry-run --eval-only).
  EvalOptions eval;
  int64_t eval_interval = 0;
  bool eval_first = false;
  // The logs people read (driver/run_log.h): `log` is a terminal (the progress line is rewritten
  // in place); a progress line (and a --metrics object) every log_interval steps (0: the default,
  // DefaultLogInterval); --metrics FILE.jsonl; --loss-curve FILE.svg (log_scale: --loss-curve-log).
  bool log_is_terminal = false;
  int64_t log_interval = 0;
  std::string metrics;
  std::string loss_curve;
  bool loss_curve_log = false;
  // Periodic checkpoints (llm-foundry's save_interval, save_folder, save_num_checkpoints_to_keep):
  // every save_interval steps, and at the run's last step, the --save layout in
  // save_folder/step<N> (Trainer::Save: each written whole, then swapped in); of the checkpoints
  // this run wrote, the newest save_keep are kept (0: all). Unlike --save, they are not part of
  // the run's all-or-nothing outputs: a run that fails later keeps the ones already written.
  // The run holds save_folder's lock (base/folder_lock.h) from before its first step to its end:
  // a second run saving there is refused. Before each checkpoint, the temp folders that dead runs
  // left in save_folder are removed (base/output_set.h RemoveStagingDebris).
  int64_t save_interval = 0;  // 0: none
  std::string save_folder;
  int64_t save_keep = 0;
  // Warnings about the run's settings (--labels against the plan's rule), one line each, without
  // a prefix; before the header.
  std::function<void(const std::string&)> warn;
};

// Planned against measured bytes of the step loop per class. Measured: the backend's high-water
// marks from the first step on (peaks are reset then, after loading, initialisation and --resume,
// whose transients come before any step runs). kOther is not planned: other_* say what it held.
struct RunMemory {
  BytesByClass planned;   // [kArena]: the layout's arena; the rest: the plan's bytes outside it
  BytesByClass measured;  // the high-water mark of each class
  int64_t total_planned = 0;
  // The planned classes' high-water mark: the total's, less the bytes outside them when the loop
  // started (graph structure: Constant nodes' payloads).
  int64_t total_measured = 0;
  int64_t other_before = 0;  // bytes outside the planned classes when the loop started
  int64_t other_during = 0;  // more of them allocated during the steps (the plan says none)
  int64_t rss_baseline = 0;  // resident bytes before the plan was loaded
  int64_t peak_rss = 0;
  bool gradients_in_arena = false;  // the plan's (compiler/memory_plan.h): counted in the arena
};

// foundry-run --profile: a step's time by phase and, within the graph, by op type
// ("domain::Op" outside the default domain), mean over the profiled steps, slowest first.
struct RunProfile {
  int64_t steps = 0;
  double batch_ms = 0, graph_ms = 0, check_ms = 0, optimizer_ms = 0;
  // The graph's time by the phase its nodes carry (compiler/phase.h); recompute_ms is what the
  // checkpointing plan adds to the step. Nodes without a phase mark count as forward.
  double forward_ms = 0, backward_ms = 0, recompute_ms = 0;
  struct Op {
    std::string op;
    double ms = 0;
    int64_t nodes = 0;
  };
  std::vector<Op> ops;
  double norm_ms = 0;  // the gradients' global norm (and clipping)
};
std::string FormatProfile(const RunProfile& profile);

struct RunResult {
  int64_t first_step = 0;  // the steps run are first_step + 1 .. last_step
  int64_t last_step = 0;
  float loss_first = 0, loss_last = 0;
  double seconds = 0;  // the steps' own time, summed
  double ms_per_step = 0;
  double tokens_per_s = 0;
  std::vector<double> step_ms;  // each step's time
  int threads = 1;
  std::optional<RunProfile> profile;
  OptimizerOptions optimizer;  // as the run used it (a resume's, unless overridden)
  RunMemory memory;
  std::vector<EvalReport> evals;         // each eval, in order
  std::vector<float> losses;             // each step's loss: steps first_step + 1 .. last_step
  std::vector<std::string> checkpoints;  // the periodic checkpoints kept, oldest first
  // Each step's lr (the schedule's) and gradient norm before clipping (StepReport; empty when
  // not measured).
  std::vector<double> step_lr;
  std::vector<float> step_grad_norm;
};

// The trainer options a resumed run starts from: those DIR/state.json recorded (its plan in
// `plan`, when `plan` is empty). The caller overrides the ones its user gave again.
StatusOr<TrainerOptions> ResumedOptions(const std::string& dir, std::string& plan);

// The save --resume DIR continues: DIR itself when it is a save (it has a state.json; Trainer::
// Resume verifies it), else, when DIR is a --save-folder, its checkpoint step<N> with the highest
// N that verifies against its manifest (runtime/checkpoint_manifest.h), each newer one that does
// not listed in `skipped` ("DIR/step40: 'DIR/step40/model.onnx' is damaged: ..."; when none
// verifies: the newest, whose Resume then refuses it); else DIR (whose reader then says what is
// missing).
struct ResumeChoice {
  std::string target;
  std::vector<std::string> skipped;
};
ResumeChoice ChooseResume(const std::string& dir);
inline std::string ResumeTarget(const std::string& dir) { return ChooseResume(dir).target; }

StatusOr<RunResult> Train(const RunRequest& request);

// The memory table foundry-run prints after the steps (rows in kMemoryClasses order, without
// kOther, then the total), with notes on a non-AdamW optimizer and on what is outside the plan.
std::string FormatRunMemory(const RunMemory& memory, const OptimizerOptions& optimizer);
// foundry-run --report-json: the run's losses, speed and memory (RunResult).
std::string RunReportJson(const RunResult& result, int64_t steps);

// ---- --forward ----

struct ForwardRequest {
  std::string model;                    // any ONNX model
  std::vector<std::string> feeds;       // NAME=FILE.pb
  std::map<std::string, int64_t> dims;  // --dim; the rest from the feeds' shapes
  std::string dump_dir;                 // "" = no files: the caller writes them (CheckForwardDumps)
  uint64_t seed = 0;                    // dropout
};

struct ForwardResult {
  Graph graph;                            // imported and folded
  std::map<std::string, Tensor> outputs;  // by graph output name
};

// Imports the model, binds the dimensions (--dim, else from the first feed that has them),
// folds, checks the feeds and that every initializer has data, interprets. No output file may
// be one of the run's inputs (the model, a feed): checked here, before any is written.
StatusOr<ForwardResult> RunForward(const ForwardRequest& request);

// DIR/<output>.pb for graph output `name`.
std::string ForwardDumpPath(const std::string& dir, const std::string& name);

}  // namespace foundry
