// foundry-run: trains a compiled plan for N steps, or runs any ONNX model forward (--forward). A
// thin main: the options are parsed and checked here, the run is one library call
// (driver/train.h: Train, RunForward), and what it returns is printed here. Every error is one
// line `foundry-run: error: <message>` on stderr; exit code 2 for a wrong command line, 1 for
// anything else (tools/cli.h).
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/file_util.h"
#include "base/output_set.h"
#include "compiler/tensor_proto.h"
#include "driver/train.h"
#include "kernels/cpu/parallel.h"
#include "runtime/cuda_backend.h"
#include "tools/cli.h"

namespace fs = std::filesystem;
using namespace foundry;

namespace {

constexpr const char* kTool = "foundry-run";

int Fail(const std::string& message, int code = cli::kExitError) {
  return cli::Fail(kTool, message, code);
}

// The command line as parsed, before any check.
struct Options {
  std::string target, device = "cpu", optimizer = "adamw", data, data_dtype = "auto";
  std::string save_dir, resume_dir, dump_grads, dump_outputs, report_json;
  std::vector<std::string> feeds, dim_specs;
  std::string steps_text = "1", seed_text = "0", init_seed_text = "0", threads_text;
  bool forward = false, tf32 = false, profile = false;
  OptimizerOptions opt;
  std::string labels = "auto";
  // After the checks: the integers.
  int64_t steps = 1;
  uint64_t seed = 0, init_seed = 0;
  int threads = 1;
};

bool Given(const CLI::App& app, const std::string& option) {
  return app.get_option(option)->count() > 0;
}

void AddRunOptions(CLI::App& app, Options& o) {
  app.add_option("target", o.target,
                 "PREFIX of a compiled plan (or the .plan file); with --forward, an ONNX model");
  app.add_flag("--forward", o.forward,
               "run the model given as target forward once (no plan needed) and print its outputs");
  app.add_option("--device", o.device, "cpu or cuda")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            return s == "cpu" || s == "cuda" ? ""
                                             : "unknown device '" + s + "' (choose cpu or cuda)";
          },
          "cpu|cuda"))
      ->capture_default_str();
  app.add_flag("--tf32", o.tf32,
               "--device cuda: let cuBLAS use TF32 tensor cores in matrix products "
               "(faster, about 10 mantissa bits; off: exact fp32)");
  app.add_option("--threads", o.threads_text,
                 "CPU threads of the kernels and of OpenBLAS (results do not depend on it); "
                 "default: the cores this process may use (" +
                     std::to_string(AvailableCpus()) + " here)")
      ->type_name("N");
  app.add_flag("--profile", o.profile,
               "after the steps, print where a step's time goes: by phase, and by op type within "
               "the graph (steps 2..N; CPU backend)");
  app.add_option("--steps", o.steps_text, "training steps to run (after --resume: more steps)")
      ->type_name("N")
      ->capture_default_str();
}

void AddOptimizerOptions(CLI::App& app, Options& o) {
  app.add_option("--lr", o.opt.lr, "learning rate")->capture_default_str();
  app.add_option("--optimizer", o.optimizer, "sgd or adamw")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  app.add_option("--momentum", o.opt.momentum, "SGD momentum (0: none)")->capture_default_str();
  app.add_option("--beta1", o.opt.beta1, "AdamW beta1")->capture_default_str();
  app.add_option("--beta2", o.opt.beta2, "AdamW beta2")->capture_default_str();
  app.add_option("--eps", o.opt.eps, "AdamW epsilon")->capture_default_str();
  app.add_option("--weight-decay", o.opt.weight_decay,
                 "weight decay (decoupled for AdamW, L2 for SGD)")
      ->capture_default_str();
}

void AddDataOptions(CLI::App& app, Options& o) {
  cli::OneValueEach(
      app.add_option("--feed", o.feeds, "an input from an ONNX TensorProto file (repeatable)")
          ->type_name("NAME=FILE.pb"));
  app.add_option("--data", o.data,
                 "token file (llm.c .bin, or raw uint16/int32): windows of seq+1 tokens, batch "
                 "rows per step")
      ->type_name("FILE");
  app.add_option("--data-dtype", o.data_dtype,
                 "token width in --data; auto: llm.c's header if the file has one, else uint16")
      ->check(CLI::IsMember({"auto", "uint16", "int32"}))
      ->capture_default_str();
  app.add_option("--labels", o.labels,
                 "labels from token windows: shifted (window[1:seq+1]) or same (= input_ids); "
                 "auto: same if the model has its own loss, else shifted")
      ->check(CLI::IsMember({"auto", "shifted", "same"}))
      ->capture_default_str();
  app.add_option("--seed", o.seed_text, "seed of dropout masks and synthetic tokens")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--init-seed", o.init_seed_text,
                 "seed of the initialisation of weightless parameters")
      ->type_name("N")
      ->capture_default_str();
}

void AddOutputOptions(CLI::App& app, Options& o) {
  app.add_option("--save", o.save_dir, "after the run, save weights + optimizer state to DIR")
      ->type_name("DIR");
  app.add_option("--resume", o.resume_dir, "continue the run saved in DIR")->type_name("DIR");
  app.add_option("--dump-grads", o.dump_grads,
                 "write the first step's gradients to DIR/<param>_grad.pb")
      ->type_name("DIR");
  app.add_option("--dump-outputs", o.dump_outputs,
                 "write the first step's graph outputs (--forward: the outputs) to DIR/<name>.pb")
      ->type_name("DIR");
  app.add_option("--report-json", o.report_json,
                 "write the run's figures (loss, speed, planned vs measured memory) to FILE as "
                 "JSON")
      ->type_name("FILE");
  cli::OneValueEach(
      app.add_option("--dim", o.dim_specs, "with --forward: bind a symbolic dimension")
          ->type_name("NAME=VALUE"));
}

// What the command line alone decides, for training and --forward alike.
std::optional<int> CheckCommandLine(const CLI::App& app, Options& o) {
  auto steps =
      cli::ParseInteger<int64_t>("--steps", o.steps_text, 0, INT64_MAX, "a number of steps");
  if (!steps.ok()) return Fail(steps.status().message(), cli::kExitUsage);
  auto seed = cli::ParseInteger<uint64_t>("--seed", o.seed_text, 0, UINT64_MAX, "an integer");
  if (!seed.ok()) return Fail(seed.status().message(), cli::kExitUsage);
  auto init_seed =
      cli::ParseInteger<uint64_t>("--init-seed", o.init_seed_text, 0, UINT64_MAX, "an integer");
  if (!init_seed.ok()) return Fail(init_seed.status().message(), cli::kExitUsage);
  o.threads = AvailableCpus();
  if (Given(app, "--threads")) {
    auto threads = cli::ParseInteger<int>("--threads", o.threads_text, 1, 1024, "a thread count");
    if (!threads.ok()) return Fail(threads.status().message(), cli::kExitUsage);
    o.threads = *threads;
  }
  o.steps = *steps;
  o.seed = *seed;
  o.init_seed = *init_seed;
  if (Given(app, "--tf32") && o.device != "cuda")
    return Fail("--tf32 is for --device cuda (the CPU computes in exact fp32)", cli::kExitUsage);
  if (o.profile && o.device != "cpu")
    return Fail("--profile times the CPU backend's kernels; on --device cuda use nsys",
                cli::kExitUsage);
  if (o.profile && o.forward)
    return Fail("--profile is for training runs, not --forward", cli::kExitUsage);
  if (o.forward && o.device != "cpu")
    return Fail("--forward runs on the CPU reference backend; drop --device " + o.device,
                cli::kExitUsage);
  // Before anything is loaded: --device cuda on a machine without a GPU is one line at once.
  if (o.device != "cpu")
    if (Status st = GetCudaBackend().status(); !st.ok()) return Fail(st.message());
  return std::nullopt;
}

// --forward MODEL: the outputs printed (and written to --dump-outputs DIR).
int Forward(const CLI::App& app, const Options& o) {
  if (o.target.empty())
    return Fail("--forward needs a model: foundry-run --forward MODEL.onnx", cli::kExitUsage);
  for (const char* option : {"--save", "--resume", "--dump-grads", "--data", "--report-json"})
    if (Given(app, option))
      return Fail(std::string(option) + " is for training runs, not --forward", cli::kExitUsage);
  auto dims = cli::ParseDims(o.dim_specs);
  if (!dims.ok()) return Fail(dims.status().message(), cli::kExitUsage);
  SetAllCpuThreads(o.threads);
  auto result = RunForward({o.target, o.feeds, *dims, o.dump_outputs, o.seed});
  if (!result.ok()) return Fail(result.status().message());
  // The dumps as one set (base/output_set.h): none over an input, all or none written.
  OutputSet outputs;
  std::map<std::string, std::string> dumped;  // output name -> its file
  if (!o.dump_outputs.empty()) {
    Status st = outputs.AddInput(o.target, "the model");
    for (const std::string& feed : o.feeds)
      if (st.ok()) st = outputs.AddInput(feed.substr(feed.find('=') + 1), "a --feed file");
    for (const auto& name : result->graph.outputs) {
      if (!st.ok()) break;
      const std::string path = ForwardDumpPath(o.dump_outputs, name);
      st = outputs.AddFile(path, "--dump-outputs", {/*special=*/false, /*make_parents=*/true});
      if (!st.ok()) break;
      auto staged = outputs.Stage(path);
      st = staged.ok() ? WriteTensorFile(*staged, result->outputs.at(name), name) : staged.status();
      dumped[name] = path;
    }
    if (st.ok()) st = outputs.Commit();
    if (!st.ok()) return Fail(st.message());
  }
  std::cout << "foundry-run --forward " << o.target << "\n";
  for (const auto& name : result->graph.outputs) {
    const Tensor& t = result->outputs.at(name);
    std::cout << "  " << name << "  " << DTypeName(t.dtype()) << ShapeToString(t.shape());
    if (t.numel() == 1 && IsFloat(t.dtype())) std::cout << "  = " << t.GetAsDouble(0);
    if (dumped.count(name)) std::cout << "  -> " << dumped.at(name);
    std::cout << "\n";
  }
  return 0;
}

// The trainer's options: a resumed run continues with its saved settings, and the flags given
// now override them.
std::optional<int> BuildRunRequest(const CLI::App& app, Options& o, RunRequest& r) {
  const bool resumed = !o.resume_dir.empty();
  if (resumed) {
    auto saved = ResumedOptions(o.resume_dir, o.target);
    if (!saved.ok()) return Fail(saved.status().message());
    r.trainer = *saved;
  }
  if (o.target.empty())
    return Fail("no plan given: foundry-run PREFIX (the -o PREFIX of foundry-compile)",
                cli::kExitUsage);
  auto now = [&](const char* option) { return !resumed || Given(app, option); };
  OptimizerOptions& opt = r.trainer.optimizer;
  if (now("--optimizer")) opt.kind = *ParseOptimizerName(o.optimizer);
  if (now("--lr")) opt.lr = o.opt.lr;
  if (now("--momentum")) opt.momentum = o.opt.momentum;
  if (now("--beta1")) opt.beta1 = o.opt.beta1;
  if (now("--beta2")) opt.beta2 = o.opt.beta2;
  if (now("--eps")) opt.eps = o.opt.eps;
  if (now("--weight-decay")) opt.weight_decay = o.opt.weight_decay;
  if (now("--seed")) r.trainer.seed = o.seed;
  if (now("--init-seed")) r.trainer.init_seed = o.init_seed;
  if (now("--feed")) r.trainer.feeds = o.feeds;
  if (now("--data")) r.trainer.data_path = o.data;
  if (now("--data-dtype")) r.trainer.data_dtype = *ParseTokenDType(o.data_dtype);
  if (now("--labels")) r.trainer.labels = *ParseLabelRule(o.labels);
  r.trainer.device = o.device;
  r.trainer.tf32 = o.tf32;
  r.trainer.dump_grads_dir = o.dump_grads;
  r.trainer.dump_outputs_dir = o.dump_outputs;
  // Values given now; those read from a save were checked by ReadTrainState (exit 1).
  if (Status st = CheckOptimizerOptions(opt); !st.ok()) return Fail(st.message(), cli::kExitUsage);
  r.plan = o.target;
  r.steps = o.steps;
  r.resume_dir = o.resume_dir;
  r.save_dir = o.save_dir;
  r.report_json = o.report_json;
  r.threads = o.threads;
  r.profile = o.profile;
  r.log = &std::cout;
  r.warn = [](const std::string& w) { std::cerr << kTool << ": warning: " << w << "\n"; };
  return std::nullopt;
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
  Options o;
  AddRunOptions(app, o);
  AddOptimizerOptions(app, o);
  AddDataOptions(app, o);
  AddOutputOptions(app, o);
  if (auto code = cli::Parse(app, argc, argv, kTool)) return *code;
  // --data '': a resumed run's saved --data dropped (to --feed instead).
  if (auto code = cli::RejectEmptyValues(app, kTool, {"--data"})) return *code;
  if (Given(app, "--data") && o.data.empty() && o.resume_dir.empty())
    return Fail(
        "--data is empty; give FILE (an empty --data only drops the data file of a "
        "--resume run)",
        cli::kExitUsage);
  if (auto code = CheckCommandLine(app, o)) return *code;
  if (o.forward) return Forward(app, o);
  if (Given(app, "--dim"))
    return Fail("--dim is for --forward; a plan's dimensions are fixed by foundry-compile --dim",
                cli::kExitUsage);
  RunRequest request;
  if (auto code = BuildRunRequest(app, o, request)) return *code;
  auto result = Train(request);
  if (!result.ok()) return Fail(result.status().message());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return foundry::cli::RunMain(kTool, [&] { return Main(argc, argv); });
}
