// foundry-run: trains a compiled plan for N steps (runtime/trainer.h), or runs any ONNX model
// forward (--forward). A thin main: option parsing and printing here, everything else in the
// libraries. Every error is one line `foundry-run: error: <message>` on stderr; exit code 2 for a
// wrong command line, 1 for anything else (tools/cli.h).
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/file_util.h"
#include "base/memory_accounting.h"
#include "compiler/onnx_import.h"
#include "compiler/tensor_proto.h"
#include "passes/fold.h"
#include "runtime/cuda_backend.h"
#include "runtime/interpreter.h"
#include "runtime/trainer.h"
#include "tools/cli.h"

namespace fs = std::filesystem;
using namespace foundry;

namespace {

constexpr const char* kTool = "foundry-run";

int Fail(const std::string& message, int code = cli::kExitError) {
  return cli::Fail(kTool, message, code);
}

std::string Format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// Before anything is loaded: --device cuda on a machine without a GPU is one line at once.
Status CheckDevice(const std::string& device) {
  if (device == "cpu") return Status::Ok();
  return GetCudaBackend().status();
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

// Planned vs measured bytes of one training step, per class. Measured: the accounting
// allocator's high-water marks over the step loop (peaks are reset when it starts, after
// loading, initialisation and --resume, whose transients come before any step runs).
struct MemoryReport {
  struct Row {
    std::string name;  // as printed and as the JSON key
    int64_t planned = 0;
    int64_t measured = 0;
  };
  std::vector<Row> rows;  // arena, parameters, ..., outputs
  int64_t total_planned = 0;
  // The planned classes' high-water mark: the total's, less the bytes outside them when the loop
  // started (graph structure: Constant nodes' payloads).
  int64_t total_measured = 0;
  int64_t other_before = 0;  // bytes outside the planned classes when the loop started
  int64_t other_during = 0;  // more of them allocated during the steps (the plan says none)
  int64_t rss_baseline = 0;  // before the plan was loaded
  int64_t peak_rss = 0;
};

MemoryReport MeasureMemory(const Trainer& t, int64_t other_before, int64_t rss_baseline) {
  const MemoryPlan& plan = t.memory_plan();
  const BackendLayout& layout = t.executor().layout();
  const MemorySnapshot m = t.backend().Bytes();
  MemoryReport r;
  auto row = [&](const char* name, int64_t planned, MemoryClass c) {
    r.rows.push_back({name, planned, m[c].peak});
  };
  row("arena", layout.arena_bytes, MemoryClass::kArena);
  row("parameters", plan.outside[MemoryClass::kParameter], MemoryClass::kParameter);
  row("gradients", plan.outside[MemoryClass::kGradient], MemoryClass::kGradient);
  row("optimizer_state", plan.outside[MemoryClass::kOptimizerState], MemoryClass::kOptimizerState);
  row("inputs", plan.outside[MemoryClass::kInput], MemoryClass::kInput);
  row("constants", plan.outside[MemoryClass::kConstant], MemoryClass::kConstant);
  row("outputs", plan.outside[MemoryClass::kOutput], MemoryClass::kOutput);
  r.total_planned = plan.TotalBytes(layout);
  r.total_measured = m.total.peak - other_before;
  r.other_before = other_before;
  r.other_during = m[MemoryClass::kOther].peak - other_before;
  r.rss_baseline = rss_baseline;
  r.peak_rss = PeakRssBytes();
  return r;
}

std::string MiB(int64_t bytes) {
  return Format("%.2f MiB", static_cast<double>(bytes) / (1 << 20));
}

void PrintMemory(const MemoryReport& r, const OptimizerOptions& o) {
  char line[160];
  std::cout << "memory (bytes)        planned       measured\n";
  for (const auto& row : r.rows) {
    std::snprintf(
        line, sizeof line, "  %-16s %13lld  %13lld%s\n", row.name.c_str(),
        static_cast<long long>(row.planned), static_cast<long long>(row.measured),
        row.name == "arena" ? (row.planned == row.measured ? "  (equal)" : "  (DIFFERS)") : "");
    std::cout << line;
  }
  std::snprintf(line, sizeof line, "  %-16s %13lld  %13lld  (%s planned, %s measured)\n", "total",
                static_cast<long long>(r.total_planned), static_cast<long long>(r.total_measured),
                MiB(r.total_planned).c_str(), MiB(r.total_measured).c_str());
  std::cout << line;
  if (o.kind != OptimizerKind::kAdamW)
    std::cout << "  optimizer state is planned for AdamW (two slots per parameter); this run uses "
              << OptimizerName(o.kind)
              << (o.momentum != 0 ? " with momentum (one slot)" : " without momentum (none)")
              << "\n";
  std::cout << "  outside the plan   " << r.other_before << " before the steps (graph constants"
            << " in node attributes), " << r.other_during << " more during them\n"
            << "  peak RSS " << MiB(r.peak_rss) << ", " << MiB(r.peak_rss - r.rss_baseline)
            << " over the " << MiB(r.rss_baseline) << " before loading (planned total "
            << MiB(r.total_planned) << ")\n";
}

std::string ReportJson(int64_t steps, float loss_first, float loss_last, double ms_per_step,
                       double tokens_per_s, const MemoryReport& m, const OptimizerOptions& o) {
  nlohmann::ordered_json j;
  j["version"] = 1;
  j["steps"] = steps;
  j["loss_first"] = loss_first;
  j["loss_last"] = loss_last;
  j["ms_per_step"] = ms_per_step;
  j["tokens_per_s"] = tokens_per_s;
  nlohmann::ordered_json mem;
  mem["arena_planned_bytes"] = m.rows[0].planned;
  mem["arena_measured_bytes"] = m.rows[0].measured;
  mem["total_planned_bytes"] = m.total_planned;
  mem["total_measured_bytes"] = m.total_measured;
  mem["peak_rss_bytes"] = m.peak_rss;
  mem["rss_baseline_bytes"] = m.rss_baseline;
  mem["peak_rss_over_baseline_bytes"] = m.peak_rss - m.rss_baseline;
  for (const auto& row : m.rows) {
    if (row.name == "arena") continue;
    mem[row.name + "_planned_bytes"] = row.planned;
    mem[row.name + "_measured_bytes"] = row.measured;
  }
  mem["outside_plan_bytes"] = m.other_before;
  mem["outside_plan_during_steps_bytes"] = m.other_during;
  mem["optimizer_planned"] = "adamw";
  mem["optimizer"] = std::string(OptimizerName(o.kind));
  j["memory"] = mem;
  return j.dump(2) + "\n";
}

// --report-json FILE may be written at the end of the run: not over an input, not a folder, in a
// folder that exists. Checked before the first step.
Status CheckReportTarget(const Trainer& t, const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return Error("--report-json " + path + ": it is a folder; give a file name");
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::is_directory(parent, ec))
    return Error("--report-json " + path + ": the folder '" + parent.string() + "' does not exist");
  return t.CheckNotAnInput(path, "--report-json", "choose another file");
}

// --forward MODEL: import, bind dims (--dim, else from the feeds' shapes), fold, interpret.
int RunForward(const std::string& model, const std::vector<std::string>& feed_specs,
               const std::vector<std::string>& dim_specs, const std::string& dump_dir,
               uint64_t seed) {
  auto dims = cli::ParseDims(dim_specs);
  if (!dims.ok()) return Fail(dims.status().message(), cli::kExitUsage);
  ImportOptions io;
  io.dims = *dims;
  auto graph = ImportOnnx(model, io);
  if (!graph.ok()) return Fail(graph.status().message());
  Graph& g = *graph;

  std::vector<Feed> feeds;
  for (const auto& spec : feed_specs) {
    auto f = ReadFeed(spec);
    if (!f.ok()) return Fail(f.status().message());
    feeds.push_back(std::move(f).value());
  }
  // A symbolic dimension not given with --dim takes its size from the first feed that has it.
  FoldPass::Options fold;
  fold.dims = *dims;
  for (const auto& f : feeds) {
    const Value* v = g.FindValue(f.name);
    if (!v || std::find(g.inputs.begin(), g.inputs.end(), f.name) == g.inputs.end()) continue;
    for (size_t i = 0; i < v->dim_params.size() && i < f.tensor.shape().size(); ++i)
      if (!v->dim_params[i].empty() && !fold.dims.count(v->dim_params[i]))
        fold.dims[v->dim_params[i]] = f.tensor.shape()[i];
  }
  FoldPass pass(fold);
  auto changed = pass.Run(g);
  if (!changed.ok()) return Fail(changed.status().message());

  std::map<std::string, Tensor> bound;
  for (auto& f : feeds) {
    Status st = CheckFeed(f, g, g.inputs);
    if (!st.ok()) return Fail(st.message());
    bound[f.name] = std::move(f.tensor);
  }
  for (const auto& init : g.initializers) {
    const Value* v = g.FindValue(init);
    if (v && !v->data && !bound.count(init))
      return Fail("initializer '" + init +
                  "' has no data (a --no-weights export?); --forward "
                  "needs the weights, or --feed " +
                  init + "=FILE.pb");
  }
  InterpretOptions options;
  options.ctx.seed = seed;
  auto outputs = Interpret(g, bound, options);
  if (!outputs.ok()) return Fail(outputs.status().message());

  // No output may replace an input (the model, a --feed file): checked for all before any write.
  if (!dump_dir.empty()) {
    std::vector<std::string> inputs = {model};
    for (const auto& spec : feed_specs) inputs.push_back(spec.substr(spec.find('=') + 1));
    for (const auto& name : g.outputs) {
      std::string path = (fs::path(dump_dir) / (FileNameForValue(name) + ".pb")).string();
      std::optional<FileId> id = GetFileId(path);
      for (const auto& in : inputs)
        if (id && GetFileId(in) == id)
          return Fail("--dump-outputs: writing '" + path + "' would overwrite '" + in +
                      "', an input of this run; choose another folder");
    }
  }
  if (!dump_dir.empty()) {
    std::error_code ec;
    fs::create_directories(dump_dir, ec);
    if (ec) return Fail("--dump-outputs " + dump_dir + ": cannot create it: " + ec.message());
  }
  std::cout << "foundry-run --forward " << model << "\n";
  for (const auto& name : g.outputs) {
    const Tensor& t = outputs->at(name);
    std::cout << "  " << name << "  " << DTypeName(t.dtype()) << ShapeToString(t.shape());
    if (t.numel() == 1 && IsFloat(t.dtype())) std::cout << "  = " << t.GetAsDouble(0);
    if (!dump_dir.empty()) {
      std::string path = (fs::path(dump_dir) / (FileNameForValue(name) + ".pb")).string();
      Status st = WriteTensorFile(path, t, name);
      if (!st.ok()) return Fail(st.message());
      std::cout << "  -> " << path;
    }
    std::cout << "\n";
  }
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app{
      "foundry-run: train a compiled plan (PREFIX.plan + PREFIX.train.onnx from foundry-compile)\n"
      "for N steps, or run an ONNX model forward (--forward MODEL.onnx)."};
  app.footer(
      "Exit status: 0 success; 2 a wrong command line (unknown option, bad or out-of-range "
      "value);\n"
      "1 an error in the input (plan, data, a save) or in a step. Every error is one line\n"
      "`foundry-run: error: ...` on stderr.");
  std::string target, device = "cpu", optimizer = "adamw", data, data_dtype = "uint16";
  std::string save_dir, resume_dir, dump_grads, dump_outputs, report_json;
  std::vector<std::string> feeds, dim_specs;
  std::string steps_text = "1", seed_text = "0", init_seed_text = "0";
  bool forward = false, tf32 = false;
  OptimizerOptions opt;
  app.add_option("target", target,
                 "PREFIX of a compiled plan (or the .plan file); with --forward, an ONNX model");
  app.add_flag("--forward", forward,
               "run the model given as target forward once (no plan needed) and print its outputs");
  app.add_option("--device", device, "cpu or cuda")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            return s == "cpu" || s == "cuda" ? ""
                                             : "unknown device '" + s + "' (choose cpu or cuda)";
          },
          "cpu|cuda"))
      ->capture_default_str();
  auto* o_tf32 = app.add_flag("--tf32", tf32,
                              "--device cuda: let cuBLAS use TF32 tensor cores in matrix products "
                              "(faster, about 10 mantissa bits; off: exact fp32)");
  app.add_option("--steps", steps_text, "training steps to run (after --resume: more steps)")
      ->type_name("N")
      ->capture_default_str();
  auto* o_lr = app.add_option("--lr", opt.lr, "learning rate")->capture_default_str();
  auto* o_optimizer = app.add_option("--optimizer", optimizer, "sgd or adamw")
                          ->check(CLI::IsMember({"sgd", "adamw"}))
                          ->capture_default_str();
  auto* o_momentum =
      app.add_option("--momentum", opt.momentum, "SGD momentum (0: none)")->capture_default_str();
  auto* o_beta1 = app.add_option("--beta1", opt.beta1, "AdamW beta1")->capture_default_str();
  auto* o_beta2 = app.add_option("--beta2", opt.beta2, "AdamW beta2")->capture_default_str();
  auto* o_eps = app.add_option("--eps", opt.eps, "AdamW epsilon")->capture_default_str();
  auto* o_wd = app.add_option("--weight-decay", opt.weight_decay,
                              "weight decay (decoupled for AdamW, L2 for SGD)")
                   ->capture_default_str();
  auto* o_feed = cli::OneValueEach(
      app.add_option("--feed", feeds, "an input from an ONNX TensorProto file (repeatable)")
          ->type_name("NAME=FILE.pb"));
  auto* o_data = app.add_option("--data", data,
                                "flat token file: windows of seq+1 tokens, batch rows per step")
                     ->type_name("FILE");
  auto* o_data_dtype = app.add_option("--data-dtype", data_dtype, "token width in --data")
                           ->check(CLI::IsMember({"uint16", "int32"}))
                           ->capture_default_str();
  auto* o_seed = app.add_option("--seed", seed_text, "seed of dropout masks and synthetic tokens")
                     ->type_name("N")
                     ->capture_default_str();
  auto* o_init_seed = app.add_option("--init-seed", init_seed_text,
                                     "seed of the initialisation of weightless parameters")
                          ->type_name("N")
                          ->capture_default_str();
  auto* o_save =
      app.add_option("--save", save_dir, "after the run, save weights + optimizer state to DIR")
          ->type_name("DIR");
  auto* o_resume =
      app.add_option("--resume", resume_dir, "continue the run saved in DIR")->type_name("DIR");
  auto* o_dump_grads = app.add_option("--dump-grads", dump_grads,
                                      "write the first step's gradients to DIR/<param>_grad.pb")
                           ->type_name("DIR");
  app.add_option("--dump-outputs", dump_outputs,
                 "write the first step's graph outputs (--forward: the outputs) to DIR/<name>.pb")
      ->type_name("DIR");
  auto* o_report = app.add_option("--report-json", report_json,
                                  "write the run's figures (loss, speed, planned vs measured "
                                  "memory) to FILE as JSON")
                       ->type_name("FILE");
  auto* o_dim = cli::OneValueEach(
      app.add_option("--dim", dim_specs, "with --forward: bind a symbolic dimension")
          ->type_name("NAME=VALUE"));
  if (auto code = cli::Parse(app, argc, argv, kTool)) return *code;
  auto steps_or =
      cli::ParseInteger<int64_t>("--steps", steps_text, 0, INT64_MAX, "a number of steps");
  if (!steps_or.ok()) return Fail(steps_or.status().message(), cli::kExitUsage);
  auto seed = cli::ParseInteger<uint64_t>("--seed", seed_text, 0, UINT64_MAX, "an integer");
  if (!seed.ok()) return Fail(seed.status().message(), cli::kExitUsage);
  auto init_seed =
      cli::ParseInteger<uint64_t>("--init-seed", init_seed_text, 0, UINT64_MAX, "an integer");
  if (!init_seed.ok()) return Fail(init_seed.status().message(), cli::kExitUsage);

  if (o_tf32->count() && device != "cuda")
    return Fail("--tf32 is for --device cuda (the CPU computes in exact fp32)", cli::kExitUsage);
  if (forward && device != "cpu")
    return Fail("--forward runs on the CPU reference backend; drop --device " + device,
                cli::kExitUsage);
  Status st = CheckDevice(device);
  if (!st.ok()) return Fail(st.message());

  if (forward) {
    if (target.empty())
      return Fail("--forward needs a model: foundry-run --forward MODEL.onnx", cli::kExitUsage);
    for (auto* o : {o_save, o_resume, o_dump_grads, o_data, o_report})
      if (o->count())
        return Fail(o->get_name() + " is for training runs, not --forward", cli::kExitUsage);
    return RunForward(target, feeds, dim_specs, dump_outputs, *seed);
  }
  if (o_dim->count())
    return Fail("--dim is for --forward; a plan's dimensions are fixed by foundry-compile --dim",
                cli::kExitUsage);

  // Options: a resumed run continues with its saved settings; flags given now override them.
  TrainerOptions options;
  if (!resume_dir.empty()) {
    auto state = ReadTrainState(resume_dir);
    if (!state.ok()) return Fail(state.status().message());
    if (target.empty()) target = state->plan_path;
    options.optimizer = state->optimizer;
    options.seed = state->seed;
    options.init_seed = state->init_seed;
    options.feeds = state->feeds;
    options.data_path = state->data_path;
    options.data_dtype = state->data_dtype;
  }
  if (target.empty())
    return Fail("no plan given: foundry-run PREFIX (the -o PREFIX of foundry-compile)",
                cli::kExitUsage);
  if (resume_dir.empty() || o_optimizer->count())
    options.optimizer.kind = *ParseOptimizerName(optimizer);
  auto set = [&](CLI::Option* o, double& into, double value) {
    if (resume_dir.empty() || o->count()) into = value;
  };
  set(o_lr, options.optimizer.lr, opt.lr);
  set(o_momentum, options.optimizer.momentum, opt.momentum);
  set(o_beta1, options.optimizer.beta1, opt.beta1);
  set(o_beta2, options.optimizer.beta2, opt.beta2);
  set(o_eps, options.optimizer.eps, opt.eps);
  set(o_wd, options.optimizer.weight_decay, opt.weight_decay);
  if (resume_dir.empty() || o_seed->count()) options.seed = *seed;
  if (resume_dir.empty() || o_init_seed->count()) options.init_seed = *init_seed;
  if (resume_dir.empty() || o_feed->count()) options.feeds = feeds;
  if (resume_dir.empty() || o_data->count()) options.data_path = data;
  if (resume_dir.empty() || o_data_dtype->count())
    options.data_dtype = *ParseTokenDType(data_dtype);
  options.device = device;
  options.tf32 = tf32;
  options.dump_grads_dir = dump_grads;
  options.dump_outputs_dir = dump_outputs;

  // Values given now; those read from a save were checked by ReadTrainState (exit 1).
  st = CheckOptimizerOptions(options.optimizer);
  if (!st.ok()) return Fail(st.message(), cli::kExitUsage);

  const int64_t rss_baseline = RssBytes();
  auto plan = LoadPlan(target);
  if (!plan.ok()) return Fail(plan.status().message());
  auto trainer = Trainer::Create(std::move(plan).value(), options);
  if (!trainer.ok()) return Fail(trainer.status().message());
  Trainer& t = **trainer;
  if (!resume_dir.empty()) {
    st = t.Resume(resume_dir);
    if (!st.ok()) return Fail(st.message());
  }
  // Before the first step, so a long run never ends in an error it could have given at once.
  if (!save_dir.empty()) {
    st = t.CheckSaveTarget(save_dir);
    if (!st.ok()) return Fail(st.message());
  }
  if (!report_json.empty()) {
    st = CheckReportTarget(t, report_json);
    if (!st.ok()) return Fail(st.message());
  }
  if (*steps_or > INT64_MAX - t.step())
    return Fail("--steps " + steps_text + ": the run would pass step " + std::to_string(INT64_MAX) +
                " (it resumes at step " + std::to_string(t.step()) + ")");

  const LoadedPlan& lp = t.plan();
  const OptimizerOptions& o = t.options().optimizer;
  const int64_t elements = t.num_parameter_elements();
  std::cout << "foundry-run " << lp.plan_path << "\n"
            << "  model      " << lp.plan.graph_file << " (from " << lp.plan.source_model << ")\n"
            << "  params     " << lp.plan.parameters.size() << " tensors, " << elements
            << " elements (" << Format("%.2f", elements * 4.0 / (1 << 20)) << " MiB)\n";
  if (t.batch() > 0)
    std::cout << "  batch      " << t.batch() << " x " << t.seq() << " (" << t.batch() * t.seq()
              << " tokens/step)\n";
  std::cout << "  data       " << t.DataDescription() << "\n"
            << "  optimizer  " << OptimizerName(o.kind) << "  lr " << o.lr;
  if (o.kind == OptimizerKind::kAdamW)
    std::cout << "  betas (" << o.beta1 << ", " << o.beta2 << ")  eps " << o.eps;
  else
    std::cout << "  momentum " << o.momentum;
  std::cout << "  weight_decay " << o.weight_decay << "\n"
            << "  device     " << device << "\n";
  if (!resume_dir.empty())
    std::cout << "  resumed    " << resume_dir << " at step " << t.step() << "\n";

  const int64_t steps = *steps_or, first = t.step(), last = t.step() + steps;
  // The step loop's high-water marks: from here.
  t.backend().ResetPeaks();
  const int64_t other_before = t.backend().Bytes()[MemoryClass::kOther].live;
  double total_seconds = 0;
  float first_loss = 0, last_loss = 0;
  for (int64_t i = 0; i < steps; ++i) {
    auto r = t.Step();
    if (!r.ok()) return Fail(r.status().message());
    total_seconds += r->seconds;
    if (i == 0) first_loss = r->loss;
    last_loss = r->loss;
    std::cout << "step " << r->step << "/" << last << "  loss " << Format("%.4f", r->loss) << "  "
              << Format("%.1f", r->seconds * 1e3) << " ms  " << Format("%.0f", r->tokens_per_second)
              << " tok/s\n"
              << std::flush;
  }
  if (steps > 0) {
    double tokens = static_cast<double>(t.batch() * t.seq() * steps);
    std::cout << "done: " << steps << " steps (" << first + 1 << ".." << last << "), loss "
              << Format("%.4f", first_loss) << " -> " << Format("%.4f", last_loss) << ", "
              << Format("%.1f", total_seconds / steps * 1e3) << " ms/step, "
              << Format("%.0f", total_seconds > 0 ? tokens / total_seconds : 0) << " tok/s\n";
  }
  const MemoryReport memory = MeasureMemory(t, other_before, rss_baseline);
  PrintMemory(memory, o);
  if (!dump_grads.empty() && steps > 0)
    std::cout << "gradients of step " << first + 1 << " in " << dump_grads << "\n";
  if (!dump_outputs.empty() && steps > 0)
    std::cout << "outputs of step " << first + 1 << " in " << dump_outputs << "\n";
  if (!save_dir.empty()) {
    st = t.Save(save_dir);
    if (!st.ok()) return Fail(st.message());
    std::cout << "saved " << save_dir << " (step " << t.step() << ")\n";
  }
  if (!report_json.empty()) {
    const double ms = steps > 0 ? total_seconds / steps * 1e3 : 0;
    const double tps =
        total_seconds > 0 ? static_cast<double>(t.batch() * t.seq() * steps) / total_seconds : 0;
    st = WriteFileAtomic(report_json, ReportJson(steps, first_loss, last_loss, ms, tps, memory, o));
    if (!st.ok()) return Fail("--report-json " + report_json + ": " + st.message());
    std::cout << "report " << report_json << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return foundry::cli::RunMain(kTool, [&] { return Main(argc, argv); });
}
