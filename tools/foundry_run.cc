// foundry-run: trains a compiled plan for N steps, or runs any ONNX model forward (--forward). A
// thin main: the options are parsed and checked here (--config's YAML mapped onto them by
// driver/run_config.h), the run is one library call (driver/train.h: Train, RunForward), and what
// it returns is printed here. Every error is one line `foundry-run: error: <message>` on stderr;
// exit code 2 for a wrong command line, 1 for anything else (tools/cli.h).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "base/file_util.h"
#include "base/output_set.h"
#include "compiler/tensor_proto.h"
#include "compiler/train_config.h"
#include "driver/run_config.h"
#include "driver/train.h"
#include "kernels/cpu/parallel.h"
#include "runtime/cuda_backend.h"
#include "runtime/mpi_communicator.h"
#include "runtime/nccl_communicator.h"
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
  std::string init_from;
  std::vector<std::string> feeds, dim_specs;
  std::string steps_text = "1", seed_text = "0", init_seed_text = "0", threads_text;
  std::string eval_data, eval_interval_text = "0", eval_batches_text = "-1";
  bool eval_only = false, eval_first = false;
  std::string grad_accum_text;
  bool forward = false, tf32 = false, profile = false, print_schedule = false, grad_norm = false;
  OptimizerOptions opt;
  std::string scheduler = "constant", warmup_text = "0", decay_text = "0", max_steps_text = "0";
  double alpha_i = 1.0, alpha_f = 0.0, clip_norm = 0.0;
  // Logs and periodic checkpoints (driver/run_log.h).
  std::string log_interval_text, metrics, loss_curve, save_interval_text, save_folder,
      save_keep_text = "0";
  bool loss_curve_log = false;
  int64_t log_interval = 0, save_interval = 0, save_keep = 0;
  std::string labels = "auto";
  // How an MDS --data folder is read (runtime/data.h MdsReadOptions).
  bool shuffle = false, drop_last = false;
  std::string shuffle_seed_text = "9176", shuffle_block_text = "262144",
              token_encoding_type = "int64";
  // --config TRAIN.yaml: llm-foundry's training YAML; the options it set (ApplyConfig), which
  // count as given (a --resume run takes them over its saved values, as flags).
  std::string config;
  std::set<std::string> from_config;
  // After the checks: the integers.
  int64_t steps = 1;
  uint64_t seed = 0, init_seed = 0;
  int threads = 1;
};

bool Given(const CLI::App& app, const std::string& option) {
  return app.get_option(option)->count() > 0;
}

// Given on the command line, or set by --config (ApplyConfig).
bool GivenOrConfig(const CLI::App& app, const Options& o, const std::string& option) {
  return Given(app, option) || o.from_config.count(option) > 0;
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
  app.add_option("--optimizer", o.optimizer,
                 "sgd, adamw (torch.optim.AdamW) or decoupled_adamw (Composer's DecoupledAdamW: "
                 "decay not scaled by lr, only by the schedule)")
      ->check(CLI::IsMember({"sgd", "adamw", "decoupled_adamw"}))
      ->capture_default_str();
  app.add_option("--momentum", o.opt.momentum, "SGD momentum (0: none)")->capture_default_str();
  app.add_option("--beta1", o.opt.beta1, "AdamW beta1")->capture_default_str();
  app.add_option("--beta2", o.opt.beta2, "AdamW beta2")->capture_default_str();
  app.add_option("--eps", o.opt.eps, "AdamW epsilon")->capture_default_str();
  app.add_option("--weight-decay", o.opt.weight_decay,
                 "weight decay (decoupled for AdamW, L2 for SGD)")
      ->capture_default_str();
}

// Composer's schedulers and gradient clipping (runtime/lr_schedule.h), in optimizer steps.
void AddScheduleOptions(CLI::App& app, Options& o) {
  app.add_option("--scheduler", o.scheduler,
                 "lr schedule as Composer computes it: constant, cosine_with_warmup, "
                 "linear_decay_with_warmup or constant_with_warmup (step k uses the multiplier at "
                 "Composer's timestamp max(k - 2, 0))")
      ->check(CLI::IsMember(
          {"constant", "cosine_with_warmup", "linear_decay_with_warmup", "constant_with_warmup"}))
      ->capture_default_str();
  app.add_option("--warmup-steps", o.warmup_text, "t_warmup: steps of linear warmup from lr 0")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--decay-steps", o.decay_text,
                 "t_max: steps of the schedule (0: --max-steps, Composer's 1dur)")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--max-steps", o.max_steps_text,
                 "the run's total steps for the schedule (Composer's max_duration; 0: the last "
                 "step of this run). Give it to a run you will --resume")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--alpha-i", o.alpha_i,
                 "multiplier after warmup (linear_decay_with_warmup's alpha_i, "
                 "constant_with_warmup's alpha)")
      ->capture_default_str();
  app.add_option("--alpha-f", o.alpha_f,
                 "final multiplier (cosine_with_warmup, linear_decay_with_warmup)")
      ->capture_default_str();
  app.add_flag("--grad-norm", o.grad_norm,
               "measure the gradients' global 2-norm every step (printed, and in --report-json); "
               "--clip-norm measures it anyway");
  app.add_flag("--print-schedule", o.print_schedule,
               "print the lr of steps 1..--steps under the schedule (total: --max-steps, else "
               "--steps) and exit; no plan is read");
  app.add_option("--clip-norm", o.clip_norm,
                 "clip the gradients to this global 2-norm before each update "
                 "(torch.nn.utils.clip_grad_norm_; 0: no clipping)")
      ->capture_default_str();
}

void AddDataOptions(CLI::App& app, Options& o) {
  cli::OneValueEach(
      app.add_option("--feed", o.feeds, "an input from an ONNX TensorProto file (repeatable)")
          ->type_name("NAME=FILE.pb"));
  app.add_option("--data", o.data,
                 "token file (llm.c .bin, or raw uint16/int32): windows of seq+1 tokens, batch "
                 "rows per step; or an MDS split folder (index.json and shards, as llm-foundry's "
                 "convert_dataset_hf.py writes): one sample per row, cut to seq tokens")
      ->type_name("FILE|DIR");
  app.add_flag("--shuffle", o.shuffle,
               "MDS --data: read the samples in foundry's seeded order (shards shuffled, then "
               "the samples within blocks), not streaming's py1e; default: index order");
  app.add_option("--shuffle-seed", o.shuffle_seed_text, "MDS --data: the seed of --shuffle")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--shuffle-block-size", o.shuffle_block_text,
                 "MDS --data: the samples shuffled together by --shuffle")
      ->type_name("N")
      ->capture_default_str();
  app.add_flag("--drop-last", o.drop_last,
               "MDS --data: an epoch ends with its last whole global batch (else the last batch "
               "takes the next epoch's first samples)");
  app.add_option("--token-encoding-type", o.token_encoding_type,
                 "MDS data: the id type of a `bytes` token column (llm-foundry's "
                 "token_encoding_type)")
      ->check(
          CLI::IsMember({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}))
      ->capture_default_str();
  app.add_option("--data-dtype", o.data_dtype,
                 "token width in --data; auto: llm.c's header if the file has one, else uint16")
      ->check(CLI::IsMember({"auto", "uint16", "int32"}))
      ->capture_default_str();
  app.add_option("--labels", o.labels,
                 "labels from token windows: shifted (window[1:seq+1]) or same (= input_ids); "
                 "auto: same if the model has its own loss, else shifted")
      ->check(CLI::IsMember({"auto", "shifted", "same"}))
      ->capture_default_str();
  app.add_option("--grad-accum", o.grad_accum_text,
                 "microbatches per optimizer step; must be the plan's (foundry-compile "
                 "--grad-accum), which is the default")
      ->type_name("K");
  app.add_option("--seed", o.seed_text, "seed of dropout masks and synthetic tokens")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--init-seed", o.init_seed_text,
                 "seed of the initialisation of weightless parameters")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--init-from", o.init_from,
                 "start from the weights in a safetensors file (PyTorch parameter names, as "
                 "--save's model.safetensors holds them; F32, BF16 or F16)")
      ->type_name("FILE.safetensors");
}

void AddConfigOption(CLI::App& app, Options& o) {
  app.add_option("--config", o.config,
                 "an llm-foundry training YAML: optimizer, scheduler, gradient_clipping, "
                 "max_duration, eval_interval, save_interval/save_folder, seed, "
                 "console_log_interval as the options they stand for (a flag given too wins); "
                 "device_train_microbatch_size, max_seq_len and global_train_batch_size checked "
                 "against the plan")
      ->type_name("FILE.yaml");
}

void AddEvalOptions(CLI::App& app, Options& o) {
  app.add_option("--eval-data", o.eval_data,
                 "held-out token file (formats as --data): the loss and perplexity of the "
                 "forward-only eval plan on it, after the last step")
      ->type_name("FILE");
  app.add_option("--eval-interval", o.eval_interval_text,
                 "with --eval-data: also every N steps (0: only after the last)")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--eval-batches", o.eval_batches_text,
                 "with --eval-data: the first N batches of the file (-1: every whole batch)")
      ->type_name("N")
      ->capture_default_str();
  app.add_flag("--eval-first", o.eval_first, "with --eval-data: also before the first step");
  app.add_flag("--eval-only", o.eval_only,
               "evaluate the plan's weights (or --resume's) on --eval-data; no training step");
}

// The logs people read and the periodic checkpoints (driver/run_log.h, driver/train.h).
void AddLogOptions(CLI::App& app, Options& o) {
  app.add_option("--log-interval", o.log_interval_text,
                 "a progress line (and a --metrics object) every N steps, and at the run's first "
                 "and last; default: every step up to 100 steps, else at most about 100 lines")
      ->type_name("N");
  app.add_option("--metrics", o.metrics,
                 "append one JSON object per logged step (and per evaluation) to FILE as the run "
                 "goes (JSON Lines); a fresh run replaces FILE, a --resume run continues it")
      ->type_name("FILE.jsonl");
  app.add_option("--loss-curve", o.loss_curve,
                 "draw the loss against the step as an SVG picture (at the end, and at each "
                 "periodic checkpoint)")
      ->type_name("FILE.svg");
  app.add_flag("--loss-curve-log", o.loss_curve_log, "--loss-curve with a log-scale loss axis");
  app.add_option("--save-interval", o.save_interval_text,
                 "every N steps (and at the last), save a checkpoint in --save-folder DIR/step<N> "
                 "(the --save layout); kept even if the run fails later")
      ->type_name("N");
  app.add_option("--save-folder", o.save_folder,
                 "where --save-interval's checkpoints go; --resume DIR continues the latest")
      ->type_name("DIR");
  app.add_option("--save-keep", o.save_keep_text,
                 "keep the newest K of the checkpoints this run saves (0: all)")
      ->type_name("K")
      ->capture_default_str();
}

// The log and checkpoint options' values, and which go together.
std::optional<int> CheckLogOptions(const CLI::App& app, Options& o) {
  if (GivenOrConfig(app, o, "--log-interval")) {
    auto n = cli::ParseInteger<int64_t>("--log-interval", o.log_interval_text, 1, INT64_MAX,
                                        "a number of steps");
    if (!n.ok()) return Fail(n.status().message(), cli::kExitUsage);
    o.log_interval = *n;
  }
  if (GivenOrConfig(app, o, "--save-interval")) {
    auto n = cli::ParseInteger<int64_t>("--save-interval", o.save_interval_text, 1, INT64_MAX,
                                        "a number of steps");
    if (!n.ok()) return Fail(n.status().message(), cli::kExitUsage);
    o.save_interval = *n;
  }
  auto keep = cli::ParseInteger<int64_t>("--save-keep", o.save_keep_text, 0, INT64_MAX, "a count");
  if (!keep.ok()) return Fail(keep.status().message(), cli::kExitUsage);
  o.save_keep = *keep;
  if (GivenOrConfig(app, o, "--save-interval") && !GivenOrConfig(app, o, "--save-folder"))
    return Fail("--save-interval needs --save-folder DIR (where the checkpoints go)",
                cli::kExitUsage);
  if (GivenOrConfig(app, o, "--save-folder") && !GivenOrConfig(app, o, "--save-interval"))
    return Fail("--save-folder needs --save-interval N (how often to save)", cli::kExitUsage);
  if (GivenOrConfig(app, o, "--save-keep") && !GivenOrConfig(app, o, "--save-folder"))
    return Fail(
        "--save-keep is for --save-folder's checkpoints; give --save-folder DIR and "
        "--save-interval N",
        cli::kExitUsage);
  if (o.loss_curve_log && !GivenOrConfig(app, o, "--loss-curve"))
    return Fail("--loss-curve-log needs --loss-curve FILE.svg", cli::kExitUsage);
  return std::nullopt;
}

void AddOutputOptions(CLI::App& app, Options& o) {
  app.add_option("--save", o.save_dir,
                 "after the run, save weights (model.onnx; model.safetensors with PyTorch names) + "
                 "optimizer state to DIR")
      ->type_name("DIR");
  app.add_option("--resume", o.resume_dir, "continue the run saved in DIR")->type_name("DIR");
  app.add_option("--dump-grads", o.dump_grads,
                 "write the first step's gradients to DIR/<param>_grad.pb (as the optimizer "
                 "used them: after --clip-norm)")
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
  AddLogOptions(app, o);
}

// Where --config's notes and warnings go: stderr, except on the ranks other than 0 of a run
// mpirun started, which would only repeat rank 0's lines (their errors still print).
std::ostream& ConfigNotes() {
  static std::ostream none(nullptr);
  return LauncherWorldSize() > 1 && LauncherRank() != 0 ? none : std::cerr;
}

// Sets the option the YAML's key stands for (driver/run_config.h), unless the command line gave
// it: then the flag wins, with a warning where they differ.
void SetFromConfig(const CLI::App& app, Options& o, const ConfigOption& option) {
  const std::string& flag = option.flag;
  if (std::holds_alternative<bool>(option.value)) {  // a switch: --eval-first, --shuffle, ...
    const std::map<std::string, bool*> switches = {
        {"--eval-first", &o.eval_first}, {"--shuffle", &o.shuffle}, {"--drop-last", &o.drop_last}};
    bool& on = *switches.at(flag);
    if (!on) {
      on = true;
      o.from_config.insert(flag);
    }
    return;
  }
  auto set = [&](auto& into, const auto& value) {
    if (!Given(app, flag)) {
      into = value;
      o.from_config.insert(flag);
    } else if (into != value) {
      ConfigNotes() << kTool << ": warning: " << flag << " " << into << " overrides " << o.config
                    << "'s " << option.key << " (" << value << ")\n";
    }
  };
  if (const double* number = std::get_if<double>(&option.value)) {
    const std::map<std::string, double*> numbers = {{"--lr", &o.opt.lr},
                                                    {"--beta1", &o.opt.beta1},
                                                    {"--beta2", &o.opt.beta2},
                                                    {"--eps", &o.opt.eps},
                                                    {"--weight-decay", &o.opt.weight_decay},
                                                    {"--alpha-i", &o.alpha_i},
                                                    {"--alpha-f", &o.alpha_f},
                                                    {"--clip-norm", &o.clip_norm}};
    return set(*numbers.at(flag), *number);
  }
  const std::map<std::string, std::string*> texts = {
      {"--max-steps", &o.max_steps_text},
      {"--steps", &o.steps_text},
      {"--optimizer", &o.optimizer},
      {"--scheduler", &o.scheduler},
      {"--warmup-steps", &o.warmup_text},
      {"--decay-steps", &o.decay_text},
      {"--seed", &o.seed_text},
      {"--log-interval", &o.log_interval_text},
      {"--eval-interval", &o.eval_interval_text},
      {"--eval-batches", &o.eval_batches_text},
      {"--data", &o.data},
      {"--eval-data", &o.eval_data},
      {"--shuffle-seed", &o.shuffle_seed_text},
      {"--shuffle-block-size", &o.shuffle_block_text},
      {"--token-encoding-type", &o.token_encoding_type},
      {"--save-interval", &o.save_interval_text},
      {"--save-folder", &o.save_folder},
      {"--save-keep", &o.save_keep_text}};
  set(*texts.at(flag), std::get<std::string>(option.value));
}

// --config TRAIN.yaml (compiler/train_config.h): read, its notes printed, and each key
// foundry-run reads set as the option it stands for (driver/run_config.h: MapRunConfig).
std::optional<int> ApplyConfig(const CLI::App& app, Options& o) {
  if (o.config.empty()) return std::nullopt;
  if (o.forward) return Fail("--config is for training runs, not --forward", cli::kExitUsage);
  auto read = ReadTrainConfig(o.config);
  if (!read.ok()) return Fail(read.status().message());
  if (std::string line = IgnoredKeysLine(*read); !line.empty())
    ConfigNotes() << kTool << ": note: " << line << "\n";
  for (const auto& w : read->warnings) ConfigNotes() << kTool << ": warning: " << w << "\n";
  if (o.target.empty())
    return Fail("no plan given: foundry-run PREFIX --config " + o.config, cli::kExitUsage);
  RunConfigRequest request;
  request.path = o.config;
  request.plan = o.target;
  request.data = o.data;
  request.data_dtype = o.data_dtype;
  request.resume_dir = o.resume_dir;
  request.eval_only = o.eval_only;
  request.eval_data = !o.eval_data.empty();
  request.set = [&](const ConfigOption& option) { SetFromConfig(app, o, option); };
  request.note = [](const std::string& line) {
    ConfigNotes() << kTool << ": note: " << line << "\n";
  };
  if (Status st = MapRunConfig(*read, request); !st.ok()) return Fail(st.message());
  return std::nullopt;
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
  for (const char* option : {"--save", "--resume", "--dump-grads", "--data", "--report-json",
                             "--eval-data", "--init-from", "--log-interval", "--metrics",
                             "--loss-curve", "--save-interval", "--save-folder", "--save-keep"})
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

// Whether `option` sets the run's value: always in a fresh run; in a resumed one only when given
// now (on the command line or by --config), else the save's value stands.
bool SetsValue(const CLI::App& app, const Options& o, const char* option) {
  return o.resume_dir.empty() || GivenOrConfig(app, o, option);
}

// The optimizer, the lr schedule and gradient clipping.
std::optional<int> SetOptimizerOptions(const CLI::App& app, const Options& o, RunRequest& r) {
  auto now = [&](const char* option) { return SetsValue(app, o, option); };
  OptimizerOptions& opt = r.trainer.optimizer;
  if (now("--optimizer")) opt.kind = *ParseOptimizerName(o.optimizer);
  if (now("--lr")) opt.lr = o.opt.lr;
  if (now("--momentum")) opt.momentum = o.opt.momentum;
  if (now("--beta1")) opt.beta1 = o.opt.beta1;
  if (now("--beta2")) opt.beta2 = o.opt.beta2;
  if (now("--eps")) opt.eps = o.opt.eps;
  if (now("--weight-decay")) opt.weight_decay = o.opt.weight_decay;
  ScheduleOptions& sc = r.trainer.schedule;
  if (now("--scheduler")) sc.kind = *ParseScheduleName(o.scheduler);
  for (auto [option, text, into] :
       {std::tuple{"--warmup-steps", &o.warmup_text, &sc.t_warmup},
        std::tuple{"--decay-steps", &o.decay_text, &sc.t_max},
        std::tuple{"--max-steps", &o.max_steps_text, &r.trainer.total_steps}}) {
    if (!now(option)) continue;
    auto v = cli::ParseInteger<int64_t>(option, *text, 0, INT64_MAX, "a number of steps");
    if (!v.ok()) return Fail(v.status().message(), cli::kExitUsage);
    *into = *v;
  }
  if (now("--alpha-i")) sc.alpha_i = o.alpha_i;
  if (now("--alpha-f")) sc.alpha_f = o.alpha_f;
  if (now("--clip-norm")) r.trainer.clip_norm = o.clip_norm;
  r.trainer.grad_norm = o.grad_norm || !o.metrics.empty();  // --metrics records the norm
  if (Status st = CheckScheduleOptions(sc, r.trainer.total_steps); !st.ok())
    return Fail(st.message(), cli::kExitUsage);
  if (Status st = CheckClipNorm(r.trainer.clip_norm); !st.ok())
    return Fail(st.message(), cli::kExitUsage);
  return std::nullopt;
}

// The seeds, the data, the accumulation steps and the labels; the device and the dumps.
std::optional<int> SetDataOptions(const CLI::App& app, const Options& o, RunRequest& r) {
  auto now = [&](const char* option) { return SetsValue(app, o, option); };
  if (now("--seed")) r.trainer.seed = o.seed;
  if (now("--init-seed")) r.trainer.init_seed = o.init_seed;
  if (now("--feed")) r.trainer.feeds = o.feeds;
  if (now("--data")) r.trainer.data_path = o.data;
  if (now("--data-dtype")) r.trainer.data_dtype = *ParseTokenDType(o.data_dtype);
  MdsReadOptions& mds = r.trainer.mds;
  if (now("--shuffle")) mds.shuffle = o.shuffle;
  if (now("--drop-last")) mds.drop_last = o.drop_last;
  if (now("--token-encoding-type")) mds.token_encoding_type = o.token_encoding_type;
  if (now("--shuffle-seed")) {
    auto seed = cli::ParseInteger<uint64_t>("--shuffle-seed", o.shuffle_seed_text, 0, UINT64_MAX,
                                            "an integer");
    if (!seed.ok()) return Fail(seed.status().message(), cli::kExitUsage);
    mds.shuffle_seed = *seed;
  }
  if (now("--shuffle-block-size")) {
    auto block = cli::ParseInteger<int64_t>("--shuffle-block-size", o.shuffle_block_text, 1,
                                            INT64_MAX, "a number of samples");
    if (!block.ok()) return Fail(block.status().message(), cli::kExitUsage);
    mds.shuffle_block = *block;
  }
  if (Given(app, "--grad-accum")) {
    auto k = cli::ParseInteger<int64_t>("--grad-accum", o.grad_accum_text, 1, 1 << 20,
                                        "a number of microbatches");
    if (!k.ok()) return Fail(k.status().message(), cli::kExitUsage);
    r.trainer.accumulation_steps = *k;
  }
  if (now("--labels")) r.trainer.labels = *ParseLabelRule(o.labels);
  r.trainer.device = o.device;
  r.trainer.tf32 = o.tf32;
  r.trainer.dump_grads_dir = o.dump_grads;
  r.trainer.dump_outputs_dir = o.dump_outputs;
  r.trainer.init_from = o.init_from;  // never from a save: a resumed run has its weights
  return std::nullopt;
}

// --eval-data and the options that go with it.
std::optional<int> SetEvalOptions(const CLI::App& app, const Options& o, RunRequest& r) {
  if (o.eval_data.empty() && !o.eval_only && !Given(app, "--eval-interval") &&
      !Given(app, "--eval-batches") && !o.eval_first)
    return std::nullopt;
  if (o.eval_data.empty())
    return Fail(
        "--eval-only, --eval-interval, --eval-batches and --eval-first need "
        "--eval-data FILE",
        cli::kExitUsage);
  auto interval = cli::ParseInteger<int64_t>("--eval-interval", o.eval_interval_text, 0, INT64_MAX,
                                             "a number of steps");
  if (!interval.ok()) return Fail(interval.status().message(), cli::kExitUsage);
  auto batches = cli::ParseInteger<int64_t>("--eval-batches", o.eval_batches_text, -1, INT64_MAX,
                                            "a number of batches, or -1");
  if (!batches.ok() || *batches == 0)
    return Fail(batches.ok() ? "--eval-batches 0: give -1 (every whole batch) or a count"
                             : batches.status().message(),
                cli::kExitUsage);
  if (o.eval_only && Given(app, "--steps"))
    return Fail("--eval-only runs no step; drop --steps", cli::kExitUsage);
  if (o.eval_only) r.steps = 0;
  r.eval.data_path = o.eval_data;
  r.eval.data_dtype = r.trainer.data_dtype;
  r.eval.mds.token_encoding_type = o.token_encoding_type;
  r.eval.max_batches = *batches;
  r.eval_interval = *interval;
  r.eval_first = o.eval_first;
  return std::nullopt;
}

// The outputs, the logs and the periodic checkpoints, as checked (CheckLogOptions).
void SetOutputOptions(const Options& o, RunRequest& r) {
  r.resume_dir = o.resume_dir;
  r.save_dir = o.save_dir;
  r.report_json = o.report_json;
  r.threads = o.threads;
  r.profile = o.profile;
  r.log = &std::cout;
  r.log_is_terminal = ::isatty(STDOUT_FILENO) == 1;
  r.log_interval = o.log_interval;
  r.metrics = o.metrics;
  r.loss_curve = o.loss_curve;
  r.loss_curve_log = o.loss_curve_log;
  r.save_interval = o.save_interval;
  r.save_folder = o.save_folder;
  r.save_keep = o.save_keep;
  r.warn = [](const std::string& w) { ConfigNotes() << kTool << ": warning: " << w << "\n"; };
}

// The trainer's options: a resumed run continues with its saved settings, and the flags given
// now override them.
std::optional<int> BuildRunRequest(const CLI::App& app, Options& o, RunRequest& r) {
  if (!o.resume_dir.empty()) {
    auto saved = ResumedOptions(o.resume_dir, o.target);
    if (!saved.ok()) return Fail(saved.status().message());
    r.trainer = *saved;
  }
  if (o.target.empty())
    return Fail("no plan given: foundry-run PREFIX (the -o PREFIX of foundry-compile)",
                cli::kExitUsage);
  if (auto code = SetOptimizerOptions(app, o, r)) return code;
  if (auto code = SetDataOptions(app, o, r)) return code;
  // Values given now; those read from a save were checked by ReadTrainState (exit 1).
  if (Status st = CheckOptimizerOptions(r.trainer.optimizer); !st.ok())
    return Fail(st.message(), cli::kExitUsage);
  r.plan = o.target;
  r.steps = o.steps;
  if (auto code = SetEvalOptions(app, o, r)) return code;
  SetOutputOptions(o, r);
  return std::nullopt;
}

// --print-schedule: "step lr" lines, the lr as %.17g (it reads back as the same double).
int PrintSchedule(const TrainerOptions& t, int64_t steps) {
  const int64_t total = t.total_steps > 0 ? t.total_steps : steps;
  if (Status st = CheckScheduleOptions(t.schedule, total); !st.ok())
    return Fail(st.message(), cli::kExitUsage);
  std::cout << "# " << ScheduleName(t.schedule.kind) << ", lr " << t.optimizer.lr << ", " << total
            << " steps\n";
  char line[64];
  for (int64_t k = 1; k <= steps; ++k) {
    std::snprintf(line, sizeof line, "%lld %.17g\n", static_cast<long long>(k),
                  ScheduledLr(t.schedule, t.optimizer.lr, k, total));
    std::cout << line;
  }
  return 0;
}

// This process's place in a data-parallel run mpirun started (rank 0 of one without it). Rank 0
// prints and writes everything; the others print only their errors, "rank R: ".
struct World {
  int rank = 0;
  std::unique_ptr<Communicator> nccl;  // --device cuda: the collectives' device communicator
  std::string ErrorPrefix() const {
    return rank != 0 ? "rank " + std::to_string(rank) + ": " : std::string();
  }
};

// Started by mpirun with several ranks: the run joins the world as one of them.
std::optional<int> JoinWorld(const Options& o, RunRequest& request, World& world) {
  if (LauncherWorldSize() <= 1) return std::nullopt;
  // One GPU per rank: the rank's local index picks it, unless the launcher chose already.
  if (o.device == "cuda" && !std::getenv("CUDA_VISIBLE_DEVICES"))
    if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK"))
      setenv("CUDA_VISIBLE_DEVICES", local, 1);
  auto mpi = MpiWorld();
  if (!mpi.ok()) return Fail(mpi.status().message());
  request.trainer.comm = *mpi;
  world.rank = (*mpi)->rank();
  if (o.device == "cuda") {
    // The graph's collectives move device memory over NCCL (loaded at run time); the
    // trainer's own exchanges stay on MPI, in host memory.
    auto cuda = GetCudaBackend();
    auto made = cuda.ok() ? CreateNcclCommunicator(**cuda, *mpi)
                          : StatusOr<std::unique_ptr<Communicator>>(cuda.status());
    if (!made.ok()) {
      const int code = Fail(world.ErrorPrefix() + made.status().message());
      MpiAbortWorld(code);
      return code;
    }
    world.nccl = std::move(made).value();
    request.trainer.host_comm = *mpi;
    request.trainer.comm = world.nccl.get();
  }
  if (world.rank != 0) {
    request.log = nullptr;
    request.warn = nullptr;
    request.report_json.clear();
    request.metrics.clear();
    request.loss_curve.clear();
    request.trainer.dump_grads_dir.clear();
    request.trainer.dump_outputs_dir.clear();
  }
  return std::nullopt;
}

// A training run (or --print-schedule), once the command line is checked.
int RunTraining(const CLI::App& app, Options& o) {
  if (Given(app, "--init-from") && Given(app, "--resume"))
    return Fail(
        "--init-from and --resume both give the weights; drop one (a resumed run "
        "continues from its save's weights)",
        cli::kExitUsage);
  if (Given(app, "--dim"))
    return Fail("--dim is for --forward; a plan's dimensions are fixed by foundry-compile --dim",
                cli::kExitUsage);
  RunRequest request;
  if (o.print_schedule) {
    if (!o.resume_dir.empty())
      return Fail("--print-schedule reads no save; drop --resume", cli::kExitUsage);
    o.target = "(none)";  // no plan is read
  }
  if (auto code = BuildRunRequest(app, o, request)) return *code;
  if (o.print_schedule) return PrintSchedule(request.trainer, request.steps);
  World world;
  if (auto code = JoinWorld(o, request, world)) return *code;
  auto result = Train(request);
  if (!result.ok()) {
    const int code = Fail(world.ErrorPrefix() + result.status().message());
    // The other ranks may wait in a collective this one will never join: end them all.
    if (request.trainer.comm && request.trainer.comm->size() > 1) MpiAbortWorld(code);
    return code;
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
  Options o;
  AddRunOptions(app, o);
  AddOptimizerOptions(app, o);
  AddScheduleOptions(app, o);
  AddDataOptions(app, o);
  AddEvalOptions(app, o);
  AddConfigOption(app, o);
  AddOutputOptions(app, o);
  if (auto code = cli::Parse(app, argc, argv, kTool)) return *code;
  // --data '': a resumed run's saved --data dropped (to --feed instead).
  if (auto code = cli::RejectEmptyValues(app, kTool, {"--data"})) return *code;
  if (Given(app, "--data") && o.data.empty() && o.resume_dir.empty())
    return Fail(
        "--data is empty; give FILE (an empty --data only drops the data file of a "
        "--resume run)",
        cli::kExitUsage);
  if (auto code = ApplyConfig(app, o)) return *code;
  if (auto code = CheckLogOptions(app, o)) return *code;
  if (auto code = CheckCommandLine(app, o)) return *code;
  if (o.forward) return Forward(app, o);
  return RunTraining(app, o);
}

}  // namespace

int main(int argc, char** argv) {
  return foundry::cli::RunMain(kTool, [&] { return Main(argc, argv); });
}
