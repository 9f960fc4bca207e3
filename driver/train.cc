#include "driver/train.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/bytes.h"
#include "base/file_util.h"
#include "base/folder_lock.h"
#include "base/output_set.h"
#include "base/quote.h"
#include "compiler/onnx_import.h"
#include "compiler/phase.h"
#include "driver/run_log.h"
#include "kernels/cpu/parallel.h"
#include "passes/fold.h"
#include "runtime/checkpoint_manifest.h"
#include "runtime/interpreter.h"
#include "runtime/safetensors.h"
#include "runtime/train_state.h"

namespace foundry {
namespace {

namespace fs = std::filesystem;

std::string FormatNumber(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

int64_t PeakRssBytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;  // ru_maxrss is in KiB on Linux
}

// Resident bytes now (0 when /proc is not there).
int64_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

// The run report's name of a class: the JSON keys and the printed rows ("parameters").
std::string RowName(MemoryClass c) {
  std::string name(MemoryClassName(c));
  return c == MemoryClass::kArena || c == MemoryClass::kOptimizerState ? name : name + "s";
}

// The classes the plan plans, in the order of the table.
std::vector<MemoryClass> PlannedClasses() {
  std::vector<MemoryClass> classes;
  for (MemoryClass c : kMemoryClasses)
    if (c != MemoryClass::kOther) classes.push_back(c);
  return classes;
}

// Data parallel: rank 0 writes every file; the other ranks take part in the saves'
// gathers (Trainer::JoinSave) and write nothing.
bool WritesFiles(const RunRequest& r) { return !r.trainer.comm || r.trainer.comm->rank() == 0; }

// Periodic checkpoints: the steps of this run that write one.
bool SavesAt(const RunRequest& r, int64_t step, int64_t last_step) {
  return r.save_interval > 0 && !r.save_folder.empty() &&
         (step % r.save_interval == 0 || step == last_step);
}

std::string CheckpointPath(const RunRequest& r, int64_t step) {
  return (fs::path(r.save_folder) / ("step" + std::to_string(step))).string();
}

// "step<N>" (N without leading zeros) -> N; -1 for any other name.
int64_t CheckpointStep(const std::string& name) {
  if (name.size() < 5 || name.rfind("step", 0) != 0 || (name[4] == '0' && name.size() > 5))
    return -1;
  int64_t n = 0;
  for (size_t i = 4; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || n > (INT64_MAX - 9) / 10) return -1;
    n = n * 10 + (name[i] - '0');
  }
  return n;
}

// Step 2 for the logs and the save folder: --metrics and --loss-curve are outputs like the
// others (--metrics is written as the run goes, never staged: declared for the checks only);
// --save-folder is a folder of this run's own, and a step<N> already in it that this run will
// write must be an earlier save (the --save rule), found now rather than at step N.
Status CheckLogOutputs(const RunRequest& r, int64_t first_step, OutputSet& outputs) {
  if (!r.metrics.empty()) RETURN_IF_ERROR(outputs.AddFile(r.metrics, "--metrics"));
  if (!r.loss_curve.empty()) RETURN_IF_ERROR(outputs.AddFile(r.loss_curve, "--loss-curve"));
  if (r.save_folder.empty() || r.save_interval <= 0) return Status::Ok();
  RETURN_IF_ERROR(outputs.AddFolder(r.save_folder, "--save-folder"));
  const int64_t last_step = first_step + std::min(r.steps, INT64_MAX - first_step);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(r.save_folder, ec)) {
    const int64_t n = CheckpointStep(e.path().filename().string());
    if (n <= first_step || n > last_step || !SavesAt(r, n, last_step)) continue;
    std::error_code ignored;
    const bool save = e.is_directory(ignored) && (fs::is_empty(e.path(), ignored) ||
                                                  fs::exists(e.path() / "state.json", ignored));
    if (!save)
      return Error("--save-folder '" + r.save_folder + "': '" + e.path().string() +
                   "' is not a foundry-run save (no state.json), and this run writes its step-" +
                   std::to_string(n) + " checkpoint there; move it away or choose another folder");
  }
  return Status::Ok();
}

// Step 2: every file the run will write declared (and so checked) in `outputs` before the
// first step: the save folder, the report file, the first step's dumps. None may be an input, lie
// in the --resume save, or be another output.
Status CheckBeforeTheSteps(const RunRequest& r, Trainer& t, OutputSet& outputs) {
  if (!WritesFiles(r)) return Status::Ok();
  for (const std::string& input : t.input_files())
    RETURN_IF_ERROR(outputs.AddInput(input, "an input of this run"));
  RETURN_IF_ERROR(outputs.AddInput(t.resume_dir(), "the --resume save, an input of this run"));
  if (!r.save_dir.empty()) {
    RETURN_IF_ERROR(t.CheckSaveTarget(r.save_dir));
    RETURN_IF_ERROR(outputs.AddFolder(r.save_dir, "--save"));
  }
  if (!r.report_json.empty()) RETURN_IF_ERROR(outputs.AddFile(r.report_json, "--report-json"));
  RETURN_IF_ERROR(CheckLogOutputs(r, t.step(), outputs));
  if (r.steps > 0) {
    for (const auto& [path, option] : t.DumpTargets())
      RETURN_IF_ERROR(outputs.AddFile(path, option, {/*special=*/false, /*make_parents=*/true}));
    t.StageDumpsIn(&outputs);
  }
  if (r.steps > INT64_MAX - t.step())
    return Error("--steps " + std::to_string(r.steps) + ": the run would pass step " +
                 std::to_string(INT64_MAX) + " (it resumes at step " + std::to_string(t.step()) +
                 ")");
  return Status::Ok();
}

// Step 3's header.
void PrintHeader(std::ostream& log, const RunRequest& r, const Trainer& t,
                 const std::vector<std::string>& skipped) {
  const LoadedPlan& lp = t.plan();
  const OptimizerOptions& o = t.options().optimizer;
  const int64_t elements = t.num_parameter_elements();
  log << "foundry-run " << lp.plan_path << "\n"
      << "  model      " << lp.plan.graph_file << " (from " << lp.plan.source_model << ")\n"
      << "  params     " << lp.plan.parameters.size() << " tensors, " << elements << " elements ("
      << InMiB(elements * 4) << ")\n";
  if (t.batch() > 0 && t.accumulation_steps() == 1)
    log << "  batch      " << t.batch() << " x " << t.seq() << " (" << t.batch() * t.seq()
        << " tokens/step)\n";
  if (t.batch() > 0 && t.accumulation_steps() > 1)
    log << "  batch      " << t.batch() << " x " << t.seq() << " per microbatch, "
        << t.accumulation_steps() << " microbatches per step (gradient accumulation: "
        << t.accumulation_steps() * t.batch() * t.seq() << " tokens/step)\n";
  if (t.world_size() > 1)
    log << "  ranks      " << t.world_size() << " (" << t.options().comm->name() << ", "
        << lp.plan.sharding->strategy << "): rank r's microbatch k is global microbatch k*"
        << t.world_size() << "+r, " << t.world_size() * t.accumulation_steps() * t.batch()
        << " sequences a step\n";
  log << "  data       " << t.DataDescription() << "\n";
  if (const std::string labels = t.data_source().DescribeLabels(); !labels.empty())
    log << "  labels     " << labels << "\n";
  log << "  optimizer  " << OptimizerName(o.kind) << "  lr " << o.lr;
  if (IsAdam(o.kind))
    log << "  betas (" << o.beta1 << ", " << o.beta2 << ")  eps " << o.eps;
  else
    log << "  momentum " << o.momentum;
  log << "  weight_decay " << o.weight_decay << "\n";
  const ScheduleOptions& sc = t.options().schedule;
  if (sc.kind != ScheduleKind::kConstant) {
    log << "  schedule   " << ScheduleName(sc.kind) << "  warmup " << sc.t_warmup << "  t_max "
        << (sc.t_max > 0 ? sc.t_max : t.total_steps()) << "  of " << t.total_steps() << " steps";
    if (sc.kind == ScheduleKind::kCosineWithWarmup) log << "  alpha_f " << sc.alpha_f;
    if (sc.kind == ScheduleKind::kLinearDecayWithWarmup)
      log << "  alpha_i " << sc.alpha_i << "  alpha_f " << sc.alpha_f;
    if (sc.kind == ScheduleKind::kConstantWithWarmup) log << "  alpha " << sc.alpha_i;
    log << "\n";
  }
  if (t.options().clip_norm > 0) log << "  clipping   norm " << t.options().clip_norm << "\n";
  log << "  device     " << t.options().device << "\n"
      << "  threads    " << r.threads << " (OpenBLAS " << BlasCoreName()
      << " kernels, one thread per product piece)\n";
  if (!r.resume_dir.empty()) {
    log << "  resumed    " << t.resume_dir() << " at step " << t.step();
    if (t.resume_dir() != r.resume_dir)
      log << (skipped.empty() ? " (the latest checkpoint in " : " (the newest that verifies in ")
          << r.resume_dir << ")";
    log << "\n";
    for (const std::string& line : skipped) log << "  skipped    " << line << "\n";
  }
  if (!r.trainer.init_from.empty()) log << "  weights    " << r.trainer.init_from << "\n";
  if (r.save_interval > 0 && !r.save_folder.empty())
    log << "  checkpoints every " << r.save_interval << (r.save_interval == 1 ? " step" : " steps")
        << " and at the last in " << r.save_folder << "/step<N>"
        << (r.save_keep > 0 ? ", the newest " + std::to_string(r.save_keep) + " kept" : "") << "\n";
}

RunLog::CurveOptions CurveOptions(const RunRequest& r, const Trainer& t) {
  const LoadedPlan& lp = t.plan();
  const OptimizerOptions& o = t.options().optimizer;
  RunLog::CurveOptions c;
  c.title = "training loss: " + fs::path(lp.plan_path).filename().string() + " (from " +
            lp.plan.source_model + ")";
  c.subtitle =
      "batch " + std::to_string(t.batch()) + " x " + std::to_string(t.seq()) +
      (t.accumulation_steps() > 1 ? " x " + std::to_string(t.accumulation_steps()) + " microbatches"
                                  : std::string()) +
      ", " + std::string(OptimizerName(o.kind)) + " lr " + FormatNumber("%g", o.lr) +
      (t.options().schedule.kind != ScheduleKind::kConstant
           ? " (" + std::string(ScheduleName(t.options().schedule.kind)) + ")"
           : std::string()) +
      ", " + t.DataDescription();
  c.log_scale = r.loss_curve_log;
  return c;
}

// The save folder's lock for the run (none without periodic checkpoints, and on ranks but 0).
StatusOr<FolderLock> LockSaveFolder(const RunRequest& r) {
  if (!WritesFiles(r) || r.save_folder.empty() || r.save_interval <= 0) return FolderLock();
  ASSIGN_OR_RETURN(FolderLock lock, FolderLock::Take(r.save_folder, "--save-folder"));
  if (!lock.note().empty() && r.warn)
    r.warn("--save-folder " + QuoteName(r.save_folder) + ": " + lock.note());
  return lock;
}

// What dead runs left in the save folder (their temp folders, also those older than its newest
// complete checkpoint), removed before a checkpoint is written; one line each on the log.
void RemoveDebris(const RunRequest& r, RunLog& log) {
  std::optional<fs::file_time_type> newest;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(r.save_folder, ec)) {
    if (CheckpointStep(e.path().filename().string()) < 0) continue;
    std::error_code ignored;
    const fs::file_time_type t = fs::last_write_time(e.path() / kManifestFile, ignored);
    if (!ignored && (!newest || t > *newest)) newest = t;
  }
  const std::vector<std::string> removed = RemoveStagingDebris(r.save_folder, newest);
  if (removed.empty() || !r.log) return;
  log.EndLine();
  for (const std::string& line : removed)
    *r.log << "--save-folder: removed what a dead run left: " << line << "\n";
}

// A checkpoint past --save-keep: renamed to a temp folder first, so a run killed while removing
// it leaves debris (removed by the next save), never a half checkpoint.
Status RemoveCheckpoint(const std::string& dir) {
  const fs::path aside =
      fs::path(dir).parent_path() / (".foundry-tmp." + std::to_string(::getpid()) + ".removing-" +
                                     fs::path(dir).filename().string());
  std::error_code ec;
  fs::rename(dir, aside, ec);
  if (!ec) fs::remove_all(aside, ec);
  if (ec) return Error("--save-keep: cannot remove '" + dir + "': " + ec.message());
  return Status::Ok();
}

// After step `step`, when it is one: DIR/step<N> written whole (Trainer::Save), the loss curve
// refreshed, and the oldest of this run's checkpoints past --save-keep removed.
Status SaveCheckpoint(const RunRequest& r, Trainer& t, RunLog& log, RunResult& result) {
  if (!WritesFiles(r)) return t.JoinSave();
  const std::string dir = CheckpointPath(r, t.step());
  RemoveDebris(r, log);
  RETURN_IF_ERROR(t.Save(dir));
  result.checkpoints.push_back(dir);
  std::string removed;
  while (r.save_keep > 0 && static_cast<int64_t>(result.checkpoints.size()) > r.save_keep) {
    RETURN_IF_ERROR(RemoveCheckpoint(result.checkpoints.front()));
    removed += (removed.empty() ? "" : ", ") + result.checkpoints.front();
    result.checkpoints.erase(result.checkpoints.begin());
  }
  if (!r.loss_curve.empty()) {
    // Refreshed in place only when it is a file (a device or pipe gets the final curve only).
    std::error_code ec;
    const fs::file_status st = fs::status(r.loss_curve, ec);
    if (!fs::exists(st) || fs::is_regular_file(st))
      RETURN_IF_ERROR(WriteFileAtomic(r.loss_curve, log.LossCurveSvg(CurveOptions(r, t)))
                          .Prepend("--loss-curve " + r.loss_curve + ": "));
  }
  if (r.log) {
    log.EndLine();
    *r.log << "checkpoint " << dir << " (step " << t.step() << ")";
    if (!removed.empty()) *r.log << ", removed " << removed;
    *r.log << "\n" << std::flush;
  }
  return Status::Ok();
}

// The per-step means of the profiled steps' phases and per-node times, by op type.
RunProfile CollectProfile(const Trainer& t, int64_t steps, const RunProfile& phases) {
  RunProfile p = phases;
  p.steps = steps;
  const double per_step = 1e3 / static_cast<double>(steps);
  p.batch_ms *= per_step;
  p.graph_ms *= per_step;
  p.check_ms *= per_step;
  p.optimizer_ms *= per_step;
  p.norm_ms *= per_step;
  const Graph& g = t.executor().graph();
  const std::vector<double>& seconds = t.executor().node_seconds();
  std::map<std::string, RunProfile::Op> by_op;
  for (size_t i = 0; i < g.nodes.size() && i < seconds.size(); ++i) {
    const Node& n = g.nodes[i];
    const std::string name = n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type;
    RunProfile::Op& op = by_op[name];
    op.op = name;
    op.ms += seconds[i] * per_step;
    ++op.nodes;
    const std::optional<Phase> phase = PhaseOf(n);
    (phase == Phase::kRecompute  ? p.recompute_ms
     : phase == Phase::kBackward ? p.backward_ms
                                 : p.forward_ms) += seconds[i] * per_step;
  }
  for (auto& [name, op] : by_op) p.ops.push_back(op);
  std::stable_sort(p.ops.begin(), p.ops.end(),
                   [](const RunProfile::Op& a, const RunProfile::Op& b) { return a.ms > b.ms; });
  return p;
}

// One eval, logged (the progress line ended first, the --metrics object) and kept.
Status Evaluate(const RunRequest& r, Evaluator& eval, RunLog& log, RunResult& result) {
  ASSIGN_OR_RETURN(EvalReport e, eval.Run());
  log.EndLine();
  RETURN_IF_ERROR(log.AddEval({e.step, e.loss, e.perplexity}));
  if (r.log)
    *r.log << "eval  step " << e.step << "  loss " << FormatNumber("%.4f", e.loss) << "  ppl "
           << FormatNumber("%.2f", e.perplexity) << "  (" << e.batches << " batches, " << e.tokens
           << " tokens, " << FormatNumber("%.2f", e.seconds) << " s)\n"
           << std::flush;
  result.evals.push_back(e);
  return Status::Ok();
}

// Step 3's steps.
Status RunSteps(const RunRequest& r, Trainer& t, RunLog& log, RunResult& result, Evaluator* eval) {
  if (eval && (r.eval_first || r.steps == 0)) RETURN_IF_ERROR(Evaluate(r, *eval, log, result));
  result.first_step = t.step();
  result.last_step = t.step() + r.steps;
  // The first step touches the arena's pages: profiled only when it is the only one.
  const int64_t first_profiled = r.steps > 1 ? 1 : 0;
  RunProfile phases;
  log.Start();
  for (int64_t i = 0; i < r.steps; ++i) {
    if (r.profile && i == first_profiled) t.set_profile(true);
    ASSIGN_OR_RETURN(StepReport s, t.Step());
    result.seconds += s.seconds;
    result.step_ms.push_back(s.seconds * 1e3);
    result.step_lr.push_back(s.lr);
    if (s.grad_norm) result.step_grad_norm.push_back(*s.grad_norm);
    if (i >= first_profiled) {
      phases.batch_ms += s.batch_seconds;
      phases.graph_ms += s.graph_seconds;
      phases.check_ms += s.check_seconds;
      phases.optimizer_ms += s.optimizer_seconds;
      phases.norm_ms += s.norm_seconds;
    }
    if (i == 0) result.loss_first = s.loss;
    result.loss_last = s.loss;
    result.losses.push_back(s.loss);
    TrainPoint point;
    point.step = s.step;
    point.loss = s.loss;
    point.lr = s.lr;  // the schedule's
    if (s.grad_norm) point.grad_norm = *s.grad_norm;
    point.seconds = s.seconds;
    point.tokens = t.batch() * t.seq();
    RETURN_IF_ERROR(log.AddTrain(point));
    if (SavesAt(r, s.step, result.last_step)) RETURN_IF_ERROR(SaveCheckpoint(r, t, log, result));
    if (eval && ((r.eval_interval > 0 && s.step % r.eval_interval == 0) || i + 1 == r.steps))
      RETURN_IF_ERROR(Evaluate(r, *eval, log, result));
  }
  log.EndLine();
  if (r.steps == 0) return Status::Ok();
  if (r.profile) {
    result.profile = CollectProfile(t, r.steps - first_profiled, phases);
    t.set_profile(false);
  }
  const double tokens = static_cast<double>(t.accumulation_steps() * t.batch() * t.seq() * r.steps);
  result.ms_per_step = result.seconds / static_cast<double>(r.steps) * 1e3;
  result.tokens_per_s = result.seconds > 0 ? tokens / result.seconds : 0;
  if (r.log)
    *r.log << "done: " << r.steps << " steps (" << result.first_step + 1 << ".." << result.last_step
           << "), loss " << FormatNumber("%.4f", result.loss_first) << " -> "
           << FormatNumber("%.4f", result.loss_last) << ", "
           << FormatNumber("%.1f", result.ms_per_step) << " ms/step, "
           << FormatNumber("%.0f", result.tokens_per_s) << " tok/s\n";
  if (r.log && result.profile) *r.log << FormatProfile(*result.profile);
  return Status::Ok();
}

RunMemory MeasureMemory(const Trainer& t, const Evaluator* eval, int64_t other_before,
                        int64_t rss_baseline) {
  const MemoryPlan& plan = t.memory_plan();
  const BackendLayout& layout = t.executor().layout();
  const MemorySnapshot m = t.backend().Bytes();
  RunMemory r;
  for (MemoryClass c : PlannedClasses()) {
    r.planned[c] = c == MemoryClass::kArena ? layout.arena_bytes : plan.outside[c];
    r.measured[c] = m[c].peak;
  }
  r.total_planned = plan.TotalBytes(layout);
  r.gradients_in_arena = plan.gradients_in_arena;
  // An eval arena larger than the training one is its own (runtime/evaluator.h).
  if (eval) {
    r.planned[MemoryClass::kArena] += eval->extra_arena_bytes();
    r.total_planned += eval->extra_arena_bytes();
  }
  r.total_measured = m.total.peak - other_before;
  r.other_before = other_before;
  r.other_during = m[MemoryClass::kOther].peak - other_before;
  r.rss_baseline = rss_baseline;
  r.peak_rss = PeakRssBytes();
  return r;
}

// Step 4: the save and the report staged beside the dumps, all committed as one set, then the
// lines that say where they are.
Status FinishRun(const RunRequest& r, Trainer& t, const RunResult& result, const RunLog& run_log,
                 OutputSet& outputs) {
  if (!WritesFiles(r)) return r.save_dir.empty() ? Status::Ok() : t.JoinSave();
  if (!r.save_dir.empty()) {
    ASSIGN_OR_RETURN(std::string folder, outputs.Stage(r.save_dir));
    RETURN_IF_ERROR(t.SaveInto(folder).Prepend("--save " + r.save_dir + ": "));
  }
  if (!r.report_json.empty())
    RETURN_IF_ERROR(outputs.Write(r.report_json, RunReportJson(result, r.steps)));
  if (!r.loss_curve.empty())
    RETURN_IF_ERROR(outputs.Write(r.loss_curve, run_log.LossCurveSvg(CurveOptions(r, t))));
  RETURN_IF_ERROR(outputs.Commit());
  // Data parallel: the other ranks wait in Trainer::JoinSave until the save is in place.
  if (!r.save_dir.empty() && t.world_size() > 1)
    RETURN_IF_ERROR((r.trainer.host_comm ? r.trainer.host_comm : r.trainer.comm)->Barrier());
  std::ostream* log = r.log;
  if (!log) return Status::Ok();
  if (!r.trainer.dump_grads_dir.empty() && r.steps > 0)
    *log << "gradients of step " << result.first_step + 1 << " in " << r.trainer.dump_grads_dir
         << "\n";
  if (!r.trainer.dump_outputs_dir.empty() && r.steps > 0)
    *log << "outputs of step " << result.first_step + 1 << " in " << r.trainer.dump_outputs_dir
         << "\n";
  if (!r.save_dir.empty()) *log << "saved " << r.save_dir << " (step " << t.step() << ")\n";
  if (const std::vector<std::string> unmapped =
          MapTorchNames(t.plan().graph, t.plan().plan.parameters).unmapped;
      !r.save_dir.empty() && !unmapped.empty())
    *log << "warning: --save: " << unmapped.size() << " of " << t.plan().plan.parameters.size()
         << " parameters have no PyTorch name foundry can know (the export renamed them, e.g. "
         << QuoteName(unmapped[0])
         << "); model.safetensors holds them under their ONNX names, listed in its metadata "
            "\"foundry.unmapped\"\n";
  if (!r.report_json.empty()) *log << "report " << r.report_json << "\n";
  if (!r.metrics.empty()) *log << "metrics " << r.metrics << "\n";
  if (!r.loss_curve.empty()) *log << "loss curve " << r.loss_curve << "\n";
  return Status::Ok();
}

}  // namespace

ResumeChoice ChooseResume(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "state.json", ec)) return {dir, {}};
  std::vector<std::pair<int64_t, std::string>> saves;  // newest first
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t n = CheckpointStep(e.path().filename().string());
    std::error_code ignored;
    if (n >= 0 && fs::exists(e.path() / "state.json", ignored))
      saves.emplace_back(n, (fs::path(dir) / e.path().filename()).string());
  }
  std::sort(saves.rbegin(), saves.rend());
  if (saves.empty()) return {dir, {}};
  ResumeChoice choice{saves.front().second, {}};
  for (const auto& [n, save] : saves) {
    Status st = VerifyCheckpoint(save);
    if (st.ok()) {
      choice.target = save;
      return choice;
    }
    choice.skipped.push_back(save + ": " + st.message());
  }
  choice.skipped.clear();  // none verifies: the newest, refused by Trainer::Resume
  return choice;
}

StatusOr<TrainerOptions> ResumedOptions(const std::string& dir, std::string& plan) {
  ASSIGN_OR_RETURN(TrainState state, ReadVerifiedTrainState(ResumeTarget(dir)));
  if (plan.empty()) plan = state.plan_path;
  TrainerOptions o;
  o.optimizer = state.optimizer;
  o.seed = state.seed;
  o.init_seed = state.init_seed;
  o.feeds = state.feeds;
  o.data_path = state.data_path;
  o.data_dtype = state.data_dtype;
  o.schedule = state.schedule;
  o.total_steps = state.total_steps;
  o.clip_norm = state.clip_norm;
  o.accumulation_steps = state.accumulation_steps;
  o.labels = state.labels;
  o.mds = state.mds;
  return o;
}

StatusOr<RunResult> Train(const RunRequest& r) {
  SetAllCpuThreads(r.threads);
  const int64_t rss_baseline = RssBytes();
  if (!r.trainer.init_from.empty() && !r.resume_dir.empty())
    return Error(
        "--init-from and --resume both give the weights; drop one (a resumed run "
        "continues from its save's weights)");
  ASSIGN_OR_RETURN(LoadedPlan plan, LoadPlan(r.plan));
  ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer, Trainer::Create(std::move(plan), r.trainer));
  Trainer& t = *trainer;
  const ResumeChoice resume = r.resume_dir.empty() ? ResumeChoice{} : ChooseResume(r.resume_dir);
  if (!r.resume_dir.empty()) RETURN_IF_ERROR(t.Resume(resume.target));
  // The schedule's total: --max-steps, else the last step of this run.
  if (r.trainer.total_steps == 0 && r.steps > 0 && r.steps <= INT64_MAX - t.step())
    RETURN_IF_ERROR(t.SetTotalSteps(t.step() + r.steps));
  OutputSet outputs;
  RETURN_IF_ERROR(CheckBeforeTheSteps(r, t, outputs));
  std::unique_ptr<Evaluator> eval;
  if (!r.eval.data_path.empty() && t.world_size() > 1)
    return Error("--eval-data: the eval graph of a plan for " + std::to_string(t.world_size()) +
                 " ranks does not run yet; evaluate a save of it with a plan for one process");
  if (!r.eval.data_path.empty()) {
    RETURN_IF_ERROR(
        outputs.AddInput(r.eval.data_path, "the --eval-data file, an input of this run"));
    ASSIGN_OR_RETURN(eval, Evaluator::Create(t, r.eval));
  }
  RunLog log({r.log, r.log_is_terminal,
              r.log_interval > 0 ? r.log_interval : DefaultLogInterval(r.steps), t.step(),
              t.step() + r.steps, nullptr});
  ASSIGN_OR_RETURN(FolderLock save_lock, LockSaveFolder(r));
  if (!r.metrics.empty()) RETURN_IF_ERROR(log.OpenMetrics(r.metrics, !r.resume_dir.empty()));
  if (const std::string w = t.data_source().LabelsWarning(); !w.empty() && r.warn) r.warn(w);
  if (r.log) PrintHeader(*r.log, r, t, resume.skipped);
  if (r.log && eval)
    *r.log << "  eval       " << eval->Describe() << ", "
           << (r.eval_interval > 0 ? "every " + std::to_string(r.eval_interval) + " steps and "
                                   : std::string())
           << "after the last step"
           << (eval->extra_arena_bytes() > 0
                   ? " (its own arena: " + InMiB(eval->extra_arena_bytes()) + ")"
                   : " (in the training arena)")
           << "\n";

  // The step loop's high-water marks: from here.
  t.backend().ResetPeaks();
  const int64_t other_before = t.backend().Bytes()[MemoryClass::kOther].live;
  RunResult result;
  result.threads = r.threads;
  result.optimizer = t.options().optimizer;
  RETURN_IF_ERROR(RunSteps(r, t, log, result, eval.get()));
  result.memory = MeasureMemory(t, eval.get(), other_before, rss_baseline);
  if (r.log) *r.log << FormatRunMemory(result.memory, result.optimizer);
  RETURN_IF_ERROR(FinishRun(r, t, result, log, outputs));
  return result;
}

std::string FormatRunMemory(const RunMemory& m, const OptimizerOptions& o) {
  char line[160];
  std::string out = "memory (bytes)        planned       measured\n";
  for (MemoryClass c : PlannedClasses()) {
    const char* note = "";
    if (c == MemoryClass::kArena)
      note = m.planned[c] == m.measured[c] ? "  (equal)" : "  (DIFFERS)";
    if (c == MemoryClass::kGradient && m.gradients_in_arena) note = "  (in the arena)";
    std::snprintf(line, sizeof line, "  %-16s %13lld  %13lld%s\n", RowName(c).c_str(),
                  static_cast<long long>(m.planned[c]), static_cast<long long>(m.measured[c]),
                  note);
    out += line;
  }
  std::snprintf(line, sizeof line, "  %-16s %13lld  %13lld  (%s planned, %s measured)\n", "total",
                static_cast<long long>(m.total_planned), static_cast<long long>(m.total_measured),
                InMiB(m.total_planned).c_str(), InMiB(m.total_measured).c_str());
  out += line;
  if (!IsAdam(o.kind))
    out += "  optimizer state is planned for AdamW (two slots per parameter); this run uses " +
           std::string(OptimizerName(o.kind)) +
           (o.momentum != 0 ? " with momentum (one slot)" : " without momentum (none)") + "\n";
  out += "  outside the plan   " + std::to_string(m.other_before) +
         " before the steps (graph constants in node attributes), " +
         std::to_string(m.other_during) + " more during them\n";
  out += "  peak RSS " + InMiB(m.peak_rss) + ", " + InMiB(m.peak_rss - m.rss_baseline) +
         " over the " + InMiB(m.rss_baseline) + " before loading (planned total " +
         InMiB(m.total_planned) + ")\n";
  return out;
}

std::string FormatProfile(const RunProfile& p) {
  const double total = p.batch_ms + p.graph_ms + p.check_ms + p.norm_ms + p.optimizer_ms;
  std::string out = "profile: mean of " + std::to_string(p.steps) + " step" +
                    (p.steps == 1 ? "" : "s") + ", " + FormatNumber("%.1f", total) + " ms/step\n";
  out += "  batch " + FormatNumber("%.1f", p.batch_ms) + " ms, graph " +
         FormatNumber("%.1f", p.graph_ms) + " ms, finite check " +
         FormatNumber("%.1f", p.check_ms) + " ms, gradient norm " +
         FormatNumber("%.2f", p.norm_ms) + " ms, optimizer " +
         FormatNumber("%.1f", p.optimizer_ms) + " ms\n";
  out += "  graph by phase: forward " + FormatNumber("%.1f", p.forward_ms) + " ms, backward " +
         FormatNumber("%.1f", p.backward_ms) + " ms, recompute " +
         FormatNumber("%.1f", p.recompute_ms) + " ms\n";
  out += "   ms/step   share  nodes  op (graph)\n";
  constexpr size_t kShown = 20;
  double rest_ms = 0;
  size_t rest = 0;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const RunProfile::Op& op = p.ops[i];
    if (i >= kShown) {
      rest_ms += op.ms;
      ++rest;
      continue;
    }
    out += FormatNumber("%10.1f", op.ms) +
           FormatNumber("%7.1f%%", total > 0 ? 100 * op.ms / total : 0) +
           FormatNumber("%7.0f", static_cast<double>(op.nodes)) + "  " + op.op + "\n";
  }
  if (rest)
    out += FormatNumber("%10.1f", rest_ms) + "          (" + std::to_string(rest) +
           " more op types)\n";
  return out;
}

std::string RunReportJson(const RunResult& r, int64_t steps) {
  const RunMemory& m = r.memory;
  nlohmann::ordered_json j;
  j["version"] = 1;
  j["steps"] = steps;
  j["loss_first"] = r.loss_first;
  j["loss_last"] = r.loss_last;
  j["ms_per_step"] = r.ms_per_step;
  j["tokens_per_s"] = r.tokens_per_s;
  j["step_ms"] = r.step_ms;
  j["threads"] = r.threads;
  j["first_step"] = r.first_step;
  j["losses"] = r.losses;  // steps first_step + 1 .. first_step + steps
  if (!r.evals.empty()) {
    j["evals"] = nlohmann::ordered_json::array();
    for (const EvalReport& e : r.evals)
      j["evals"].push_back({{"step", e.step},
                            {"loss", e.loss},
                            {"perplexity", e.perplexity},
                            {"batches", e.batches},
                            {"tokens", e.tokens}});
  }
  j["step_lr"] = r.step_lr;
  if (!r.step_grad_norm.empty()) j["step_grad_norm"] = r.step_grad_norm;
  if (r.profile) {
    const RunProfile& p = *r.profile;
    nlohmann::ordered_json prof;
    prof["steps"] = p.steps;
    prof["batch_ms"] = p.batch_ms;
    prof["graph_ms"] = p.graph_ms;
    prof["check_ms"] = p.check_ms;
    prof["optimizer_ms"] = p.optimizer_ms;
    prof["norm_ms"] = p.norm_ms;
    prof["forward_ms"] = p.forward_ms;
    prof["backward_ms"] = p.backward_ms;
    prof["recompute_ms"] = p.recompute_ms;
    prof["ops"] = nlohmann::ordered_json::array();
    for (const RunProfile::Op& op : p.ops)
      prof["ops"].push_back({{"op", op.op}, {"ms_per_step", op.ms}, {"nodes", op.nodes}});
    j["profile"] = prof;
  }
  nlohmann::ordered_json mem;
  mem["arena_planned_bytes"] = m.planned[MemoryClass::kArena];
  mem["arena_measured_bytes"] = m.measured[MemoryClass::kArena];
  mem["total_planned_bytes"] = m.total_planned;
  mem["total_measured_bytes"] = m.total_measured;
  mem["peak_rss_bytes"] = m.peak_rss;
  mem["rss_baseline_bytes"] = m.rss_baseline;
  mem["peak_rss_over_baseline_bytes"] = m.peak_rss - m.rss_baseline;
  for (MemoryClass c : PlannedClasses()) {
    if (c == MemoryClass::kArena) continue;
    mem[RowName(c) + "_planned_bytes"] = m.planned[c];
    mem[RowName(c) + "_measured_bytes"] = m.measured[c];
  }
  mem["outside_plan_bytes"] = m.other_before;
  mem["outside_plan_during_steps_bytes"] = m.other_during;
  mem["optimizer_planned"] = "adamw";
  mem["optimizer"] = std::string(OptimizerName(r.optimizer.kind));
  j["memory"] = mem;
  return j.dump(2) + "\n";
}

// ---- --forward ----

std::string ForwardDumpPath(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / (FileNameForValue(name) + ".pb")).string();
}

namespace {

// A symbolic dimension not given with --dim takes its size from the first feed that has it.
Status FoldWithFeedDims(Graph& g, const std::vector<Feed>& feeds,
                        const std::map<std::string, int64_t>& dims) {
  FoldPass::Options fold;
  fold.dims = dims;
  for (const auto& f : feeds) {
    const Value* v = g.FindValue(f.name);
    if (!v || std::find(g.inputs.begin(), g.inputs.end(), f.name) == g.inputs.end()) continue;
    for (size_t i = 0; i < v->dim_params.size() && i < f.tensor.shape().size(); ++i)
      if (!v->dim_params[i].empty() && !fold.dims.count(v->dim_params[i]))
        fold.dims[v->dim_params[i]] = f.tensor.shape()[i];
  }
  FoldPass pass(fold);
  return pass.Run(g).status();
}

// No output may replace an input (the model, a feed file): checked for all before any write.
Status CheckForwardDumps(const ForwardRequest& r, const Graph& g) {
  std::vector<std::string> inputs = {r.model};
  for (const auto& spec : r.feeds) inputs.push_back(spec.substr(spec.find('=') + 1));
  for (const auto& name : g.outputs) {
    const std::string path = ForwardDumpPath(r.dump_dir, name);
    std::optional<FileId> id = GetFileId(path);
    for (const auto& in : inputs)
      if (id && GetFileId(in) == id)
        return Error("--dump-outputs: writing '" + path + "' would overwrite '" + in +
                     "', an input of this run; choose another folder");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ForwardResult> RunForward(const ForwardRequest& r) {
  ImportOptions io;
  io.dims = r.dims;
  ForwardResult result;
  ASSIGN_OR_RETURN(result.graph, ImportOnnx(r.model, io));
  Graph& g = result.graph;
  std::vector<Feed> feeds;
  for (const auto& spec : r.feeds) {
    ASSIGN_OR_RETURN(Feed f, ReadFeed(spec));
    feeds.push_back(std::move(f));
  }
  RETURN_IF_ERROR(FoldWithFeedDims(g, feeds, r.dims));
  std::map<std::string, Tensor> bound;
  for (auto& f : feeds) {
    RETURN_IF_ERROR(CheckFeed(f, g, g.inputs));
    bound[f.name] = std::move(f.tensor);
  }
  for (const auto& init : g.initializers) {
    const Value* v = g.FindValue(init);
    if (v && !v->data && !bound.count(init))
      return Error("initializer '" + init +
                   "' has no data (a --no-weights export?); --forward needs the weights, or "
                   "--feed " +
                   init + "=FILE.pb");
  }
  InterpretOptions options;
  options.ctx.seed = r.seed;
  ASSIGN_OR_RETURN(result.outputs, Interpret(g, bound, options));
  if (!r.dump_dir.empty()) RETURN_IF_ERROR(CheckForwardDumps(r, g));
  return result;
}

}  // namespace foundry
