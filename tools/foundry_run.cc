// foundry-run: trains a compiled plan for N steps, or runs any ONNX model forward (--forward). A
// thin main: the options are parsed and checked here, the run is one library call
// (driver/train.h: Train, RunForward), and what it returns is printed here. Every error is one
// line `foundry-run: error: <message>` on stderr; exit code 2 for a wrong command line, 1 for
// anything else (tools/cli.h).
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
#include <vector>

#include "base/file_util.h"
#include "base/output_set.h"
#include "compiler/plan.h"
#include "compiler/tensor_proto.h"
#include "compiler/train_config.h"
#include "driver/train.h"
#include "kernels/cpu/parallel.h"
#include "runtime/cuda_backend.h"
#include "runtime/mpi_communicator.h"
#include "runtime/nccl_communicator.h"
#include "runtime/train_state.h"
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

// --config TRAIN.yaml (compiler/train_config.h): each key foundry-run reads becomes the option
// it stands for, unless that option is given (then a warning says the flag wins where they
// differ). Durations (Composer's ba, tok, sp, ep, dur) become steps with the plan's batch and
// sequence, the accumulation steps and, for epochs, the --data file's windows. The plan must be
// the one the YAML compiles to: its microbatch, sequence and accumulation steps are checked.
std::optional<int> ApplyConfig(const CLI::App& app, Options& o) {
  if (o.config.empty()) return std::nullopt;
  if (o.forward) return Fail("--config is for training runs, not --forward", cli::kExitUsage);
  auto read = ReadTrainConfig(o.config);
  if (!read.ok()) return Fail(read.status().message());
  const TrainConfig& c = *read;
  const std::string source = "--config " + o.config + ": ";
  if (std::string line = IgnoredKeysLine(c); !line.empty())
    ConfigNotes() << kTool << ": note: " << line << "\n";
  for (const auto& w : c.warnings) ConfigNotes() << kTool << ": warning: " << w << "\n";
  if (o.target.empty())
    return Fail("no plan given: foundry-run PREFIX --config " + o.config, cli::kExitUsage);
  const std::string plan_path =
      o.target.size() > 5 && o.target.compare(o.target.size() - 5, 5, ".plan") == 0
          ? o.target
          : o.target + ".plan";
  auto plan = ReadPlan(plan_path);
  if (!plan.ok()) return Fail(plan.status().message());
  // The token input's batch and sequence, as the plan bound them.
  int64_t batch = 0, seq = 0;
  for (const auto& [input, axes] : plan->input_dims)
    if (input == "input_ids" || (batch == 0 && axes.size() == 2)) {
      if (axes.size() == 2 && plan->dims.count(axes[0]) && plan->dims.count(axes[1])) {
        batch = plan->dims.at(axes[0]);
        seq = plan->dims.at(axes[1]);
      }
    }
  const int64_t K = plan->grad_accumulation;
  auto mismatch = [&](const std::string& key, int64_t want, int64_t have, const std::string& what) {
    return Fail(source + key + " is " + std::to_string(want) + " but '" + plan_path + "' has " +
                what + " " + std::to_string(have) + "; compile the plan with foundry-compile " +
                "--config " + o.config);
  };
  if (batch > 0 && c.device_train_microbatch_size && *c.device_train_microbatch_size != batch)
    return mismatch("device_train_microbatch_size", *c.device_train_microbatch_size, batch,
                    "batch");
  const std::optional<int64_t> yaml_seq = c.max_seq_len ? c.max_seq_len : c.model.max_seq_len;
  if (seq > 0 && yaml_seq && *yaml_seq != seq)
    return mismatch("max_seq_len", *yaml_seq, seq, "sequence");
  // A plan of several ranks (foundry-compile --world-size N): the global batch is N ranks'.
  const int64_t world = plan->sharding ? plan->sharding->world_size : 1;
  auto accumulation = AccumulationSteps(c, world);
  if (!accumulation.ok()) return Fail(accumulation.status().message());
  if (c.global_train_batch_size && *accumulation != K)
    return mismatch("global_train_batch_size / device_train_microbatch_size", *accumulation, K,
                    "accumulation steps (--grad-accum)");
  if (world == 1 && c.fsdp.count("sharding_strategy") &&
      c.fsdp.at("sharding_strategy") != "NO_SHARD")
    ConfigNotes() << kTool << ": note: " << o.config << ": fsdp_config.sharding_strategy "
                  << c.fsdp.at("sharding_strategy")
                  << " is for a multi-process run; this is one process holding every parameter\n";

  StepUnits units;
  units.samples_per_step = batch * K * world;
  units.tokens_per_step = batch * K * world * seq;
  if (!o.data.empty() && batch > 0) {
    auto dtype = ParseTokenDType(o.data_dtype);
    auto file = TokenFile::Open(o.data, dtype.ok() ? *dtype : TokenDType::kAuto);
    if (!file.ok()) return Fail(file.status().message());
    units.steps_per_epoch = file->num_tokens() / (seq + 1) / (batch * K * world);
  }
  // Sets option `flag` (its text) from the file unless the command line gave it.
  auto set = [&](const char* flag, std::string& text, const std::string& value,
                 const std::string& key) {
    if (Given(app, flag)) {
      if (text != value)
        ConfigNotes() << kTool << ": warning: " << flag << " " << text << " overrides " << o.config
                      << "'s " << key << " (" << value << ")\n";
      return;
    }
    text = value;
    o.from_config.insert(flag);
  };
  auto set_double = [&](const char* flag, double& into, double value, const std::string& key) {
    if (Given(app, flag)) {
      if (into != value)
        ConfigNotes() << kTool << ": warning: " << flag << " " << into << " overrides " << o.config
                      << "'s " << key << " (" << value << ")\n";
      return;
    }
    into = value;
    o.from_config.insert(flag);
  };
  auto steps_of = [&](const ComposerTime& t, const std::string& key) -> StatusOr<int64_t> {
    auto steps = StepsOf(t, units, key);
    if (!steps.ok()) return Error(source + steps.status().message());
    return steps;
  };
  if (c.max_duration) {
    auto total = steps_of(*c.max_duration, "max_duration");
    if (!total.ok()) return Fail(total.status().message());
    units.max_steps = *total;
    set("--max-steps", o.max_steps_text, std::to_string(*total), "max_duration");
    // The steps to run: to max_duration, from the step a --resume save reached.
    int64_t done = 0;
    if (!o.resume_dir.empty()) {
      auto state = ReadTrainState(ResumeTarget(o.resume_dir));
      if (!state.ok()) return Fail(state.status().message());
      done = state->step;
    }
    if (!o.eval_only)
      set("--steps", o.steps_text, std::to_string(std::max<int64_t>(0, *total - done)),
          "max_duration");
  }
  if (c.optimizer) {
    const TrainConfig::Optimizer& opt = *c.optimizer;
    set("--optimizer", o.optimizer, opt.name, "optimizer.name");
    if (opt.lr) set_double("--lr", o.opt.lr, *opt.lr, "optimizer.lr");
    if (opt.beta1) set_double("--beta1", o.opt.beta1, *opt.beta1, "optimizer.betas[0]");
    if (opt.beta2) set_double("--beta2", o.opt.beta2, *opt.beta2, "optimizer.betas[1]");
    if (opt.eps) set_double("--eps", o.opt.eps, *opt.eps, "optimizer.eps");
    if (opt.weight_decay)
      set_double("--weight-decay", o.opt.weight_decay, *opt.weight_decay, "optimizer.weight_decay");
  }
  if (c.scheduler) {
    const TrainConfig::Scheduler& sc = *c.scheduler;
    if (sc.scale_warmup.value_or(false))
      return Fail(source +
                  "scheduler.scale_warmup: true is not supported (foundry has no scale_schedule "
                  "ratio, so it would change nothing in Composer either): remove it");
    set("--scheduler", o.scheduler, sc.name, "scheduler.name");
    auto warmup = steps_of(*sc.t_warmup, "scheduler.t_warmup");
    if (!warmup.ok()) return Fail(warmup.status().message());
    set("--warmup-steps", o.warmup_text, std::to_string(*warmup), "scheduler.t_warmup");
    if (sc.t_max) {
      auto t_max = steps_of(*sc.t_max, "scheduler.t_max");
      if (!t_max.ok()) return Fail(t_max.status().message());
      set("--decay-steps", o.decay_text, std::to_string(*t_max), "scheduler.t_max");
    }
    if (sc.alpha_i) set_double("--alpha-i", o.alpha_i, *sc.alpha_i, "scheduler.alpha_i");
    if (sc.alpha_f) set_double("--alpha-f", o.alpha_f, *sc.alpha_f, "scheduler.alpha_f");
  }
  if (c.clipping)
    set_double("--clip-norm", o.clip_norm, c.clipping->threshold,
               "algorithms.gradient_clipping.clipping_threshold");
  if (c.seed) set("--seed", o.seed_text, std::to_string(*c.seed), "seed");
  if (c.console_log_interval) {
    auto n = steps_of(*c.console_log_interval, "console_log_interval");
    if (!n.ok()) return Fail(n.status().message());
    if (*n > 0)
      set("--log-interval", o.log_interval_text, std::to_string(*n), "console_log_interval");
  }
  // Eval: the YAML's eval_loader reads a dataset foundry does not; --eval-data names the file.
  if (!o.eval_data.empty()) {
    if (c.eval_interval) {
      auto n = steps_of(*c.eval_interval, "eval_interval");
      if (!n.ok()) return Fail(n.status().message());
      set("--eval-interval", o.eval_interval_text, std::to_string(*n), "eval_interval");
    }
    if (c.eval_first.value_or(false) && !o.eval_first) {
      o.eval_first = true;
      o.from_config.insert("--eval-first");
    }
    if (c.eval_subset_num_batches)
      set("--eval-batches", o.eval_batches_text, std::to_string(*c.eval_subset_num_batches),
          "eval_subset_num_batches");
  } else if (c.eval_interval) {
    ConfigNotes() << kTool << ": note: " << o.config << ": eval_interval " << c.eval_interval->text
                  << " is read when --eval-data FILE names the held-out tokens\n";
  }
  if (c.save_interval && c.save_folder) {
    if (c.save_folder->find('{') != std::string::npos)
      return Fail(source + "save_folder '" + *c.save_folder +
                  "' has a {placeholder} (Composer fills in {run_name}); foundry does not: write "
                  "the folder out, or give --save-folder");
    if (c.save_folder->find("://") != std::string::npos)
      return Fail(source + "save_folder '" + *c.save_folder +
                  "' is a remote store; foundry writes local folders: give --save-folder DIR");
    auto n = steps_of(*c.save_interval, "save_interval");
    if (!n.ok()) return Fail(n.status().message());
    set("--save-interval", o.save_interval_text, std::to_string(*n), "save_interval");
    set("--save-folder", o.save_folder, *c.save_folder, "save_folder");
    if (c.save_num_checkpoints_to_keep) {
      const int64_t keep = *c.save_num_checkpoints_to_keep;
      if (keep == 0)
        return Fail(source +
                    "save_num_checkpoints_to_keep is 0 (Composer keeps no local checkpoint, "
                    "only uploads); foundry saves locally: give -1 (all) or a count");
      set("--save-keep", o.save_keep_text, std::to_string(keep < 0 ? 0 : keep),
          "save_num_checkpoints_to_keep");
    }
  } else if (c.save_interval) {
    ConfigNotes() << kTool << ": note: " << o.config
                  << ": save_interval is read with save_folder (as Composer saves); none is set\n";
  }
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
  auto now = [&](const char* option) {
    return !resumed || Given(app, option) || o.from_config.count(option);
  };
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
  if (now("--seed")) r.trainer.seed = o.seed;
  if (now("--init-seed")) r.trainer.init_seed = o.init_seed;
  if (now("--feed")) r.trainer.feeds = o.feeds;
  if (now("--data")) r.trainer.data_path = o.data;
  if (now("--data-dtype")) r.trainer.data_dtype = *ParseTokenDType(o.data_dtype);
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
  // Values given now; those read from a save were checked by ReadTrainState (exit 1).
  if (Status st = CheckOptimizerOptions(opt); !st.ok()) return Fail(st.message(), cli::kExitUsage);
  r.plan = o.target;
  r.steps = o.steps;
  if (!o.eval_data.empty() || o.eval_only || Given(app, "--eval-interval") ||
      Given(app, "--eval-batches") || o.eval_first) {
    if (o.eval_data.empty())
      return Fail(
          "--eval-only, --eval-interval, --eval-batches and --eval-first need "
          "--eval-data FILE",
          cli::kExitUsage);
    auto interval = cli::ParseInteger<int64_t>("--eval-interval", o.eval_interval_text, 0,
                                               INT64_MAX, "a number of steps");
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
    r.eval.max_batches = *batches;
    r.eval_interval = *interval;
    r.eval_first = o.eval_first;
  }
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
  // Data parallel: started by mpirun with several ranks, the run is one of them.
  // Rank 0 prints and writes everything; the others print only their errors, "rank R: ".
  int rank = 0;
  std::unique_ptr<Communicator> nccl;  // --device cuda: the collectives' device communicator
  if (LauncherWorldSize() > 1) {
    // One GPU per rank: the rank's local index picks it, unless the launcher chose already.
    if (o.device == "cuda" && !std::getenv("CUDA_VISIBLE_DEVICES"))
      if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK"))
        setenv("CUDA_VISIBLE_DEVICES", local, 1);
    auto world = MpiWorld();
    if (!world.ok()) return Fail(world.status().message());
    request.trainer.comm = *world;
    rank = (*world)->rank();
    if (o.device == "cuda") {
      // The graph's collectives move device memory over NCCL (loaded at run time); the
      // trainer's own exchanges stay on MPI, in host memory.
      auto cuda = GetCudaBackend();
      auto made = cuda.ok() ? CreateNcclCommunicator(**cuda, *world)
                            : StatusOr<std::unique_ptr<Communicator>>(cuda.status());
      if (!made.ok()) {
        const int code = Fail((rank != 0 ? "rank " + std::to_string(rank) + ": " : std::string()) +
                              made.status().message());
        MpiAbortWorld(code);
        return code;
      }
      nccl = std::move(made).value();
      request.trainer.host_comm = *world;
      request.trainer.comm = nccl.get();
    }
    if (rank != 0) {
      request.log = nullptr;
      request.warn = nullptr;
      request.report_json.clear();
      request.metrics.clear();
      request.loss_curve.clear();
      request.trainer.dump_grads_dir.clear();
      request.trainer.dump_outputs_dir.clear();
    }
  }
  auto result = Train(request);
  if (!result.ok()) {
    const int code = Fail((rank != 0 ? "rank " + std::to_string(rank) + ": " : std::string()) +
                          result.status().message());
    // The other ranks may wait in a collective this one will never join: end them all.
    if (request.trainer.comm && request.trainer.comm->size() > 1) MpiAbortWorld(code);
    return code;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return foundry::cli::RunMain(kTool, [&] { return Main(argc, argv); });
}
