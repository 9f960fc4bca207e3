// foundry-compile: reads an exported model, builds the training graph and writes the plan.
// A thin main: the options are parsed and checked here, the compile is one library call
// (driver/compile.h), and what it returns is printed and written here.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "base/file_util.h"
#include "base/output_set.h"
#include "base/quote.h"
#include "compiler/ckpt_targets.h"
#include "compiler/import_sequences.h"
#include "compiler/model_files.h"
#include "compiler/module_tree.h"
#include "compiler/op_schema.h"
#include "compiler/plan.h"
#include "compiler/train_config.h"
#include "compiler/yaml_merge.h"
#include "driver/compile.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/parallel.h"
#include "passes/ckpt_budget.h"
#include "passes/memory_plan.h"
#include "passes/memory_report.h"
#include "passes/memory_timeline.h"
#include "runtime/safetensors.h"
#include "tools/cli.h"

namespace fs = std::filesystem;
using namespace foundry;

namespace {

constexpr const char* kTool = "foundry-compile";

int Fail(const std::string& message, int code = cli::kExitError) {
  return cli::Fail(kTool, message, code);
}

// The command line as parsed, before any check.
struct Options {
  std::string model, prefix;
  bool output_given = false, dry_run = false;
  bool list_modules = false, list_ops = false, forward_only = false, no_attention_fusion = false;
  std::vector<std::string> dim_specs, input_shape_specs, freeze, trainable, ckpt_specs;
  std::string fold_limit_text = std::to_string(int64_t{1} << 20);
  std::string dump_after, dump_plan;
  bool dump_plan_given = false;
  std::string ckpt_config, memory_budget_text, emit_ckpt_config, memory_frontier;
  std::string config;      // --config: an llm-foundry training YAML
  std::string merge_into;  // --merge-into: the YAML --emit-ckpt-config's keys are merged into
  std::string report_json, memory_timeline, threads_text;
  std::string precision = "fp32";
  bool precision_given = false;
  bool grad_accum_given = false;
  std::string grad_accum_text = "1";
  std::string world_size_text = "1";
  std::string sharding;  // "" = FULL_SHARD, or fsdp_config.sharding_strategy with --config
  std::string shard_group_text = "8";
  std::string link_gbps_text;  // --link-gbps: the interconnect, gigabits per second per rank
  double link_gbps = 0;
  std::string ckpt_syntax;      // --ckpt-syntax; "" = llm-foundry
  std::string mixed_precision;  // --fsdp-mixed-precision; "" = --config's, or the default
  std::string loss_fn;          // --loss-fn; "" = --config's model.loss_fn, or fused_crossentropy
  std::string weight_copies;    // --autocast-weight-copies; "" = saved for an FSDP run, else recast
  std::string device_reserve;   // --device-reserve; "" = the default (see ParseBudget)

  // The files written after the plan, in the order they are written, each with the option
  // that names it in messages.
  std::vector<OutputFile> ReportFiles() const {
    return {{report_json, "--report-json FILE"},
            {memory_timeline, "--memory-timeline FILE.svg"},
            {emit_ckpt_config, "--emit-ckpt-config FILE"},
            {memory_frontier, "--memory-frontier FILE.svg"}};
  }
};

void AddModelOptions(CLI::App& app, Options& o) {
  app.add_option("model", o.model, "the exported model (.onnx)");
  app.add_option("-o,--output", o.prefix,
                 "output prefix: writes PREFIX.train.onnx and PREFIX.plan "
                 "(default: the model's file stem, in the current folder)");
  app.add_flag("--dry-run", o.dry_run, "compile and print the report, but write no plan");
  app.add_option("--threads", o.threads_text,
                 "CPU threads the plan's kernel scratch is sized for (a run with more threads "
                 "uses this many where a kernel needs scratch per thread); default: the cores "
                 "this process may use (" +
                     std::to_string(AvailableCpus()) + " here)")
      ->type_name("N");
}

void AddCkptOptions(CLI::App& app, Options& o) {
  cli::OneValueEach(
      app.add_option("--ckpt", o.ckpt_specs,
                     "checkpoint these modules (repeatable): an llm-foundry "
                     "activation_checkpointing_target name (mptblock, grouped_query_attention, "
                     "mptmlp, ...), a class name, a module-path glob (transformer.blocks.*.attn), "
                     "a child of every block (attn) or `block`; =LAYERS picks layers as "
                     "llm-foundry's target_blocks: 3 (the first 3), first-2,last-1, middle-2, "
                     "range-0-4, [0,2,5]")
          ->type_name("NAME[=LAYERS]"));
  app.add_option("--memory-budget", o.memory_budget_text,
                 "choose what to checkpoint: the fewest recompute FLOPs whose planned training "
                 "step fits in SIZE (bytes, or KiB/MiB/GiB/TiB, KB/MB/GB/TB: 20GiB); prints the "
                 "choice as llm-foundry config")
      ->type_name("SIZE");
  app.add_option("--device-reserve", o.device_reserve,
                 "with --memory-budget: bytes per GPU the plan cannot see (the CUDA context, "
                 "cuBLAS and NCCL buffers, the allocator's rounding), taken off the budget; "
                 "default 1GiB for a per-GPU answer (--world-size N >= 2, or a --config with "
                 "fsdp_config), else 0")
      ->type_name("SIZE");
  app.add_option("--emit-ckpt-config", o.emit_ckpt_config,
                 "write the checkpointing chosen by --memory-budget (or given by --ckpt) as "
                 "llm-foundry config, which --ckpt-config reads back")
      ->type_name("FILE");
  app.add_option("--memory-frontier", o.memory_frontier,
                 "draw planned total against recompute FLOPs for budgets from nothing "
                 "checkpointed to every block, with llm-foundry's uniform targets marked")
      ->type_name("FILE.svg");
  app.add_option("--ckpt-syntax", o.ckpt_syntax,
                 "what --memory-budget may answer: llm-foundry (default: only configs upstream "
                 "llm-foundry accepts: the dict form, one name per block, mptblock and attention "
                 "or norm keys, no FFN keys; a non-MPT model's blocks all or none) or foundry "
                 "(any selection --ckpt-config reads, with notes where upstream refuses it)")
      ->type_name("SYNTAX");
  app.add_option("--ckpt-config", o.ckpt_config,
                 "read the targets from an llm-foundry activation_checkpointing_target (a YAML or "
                 "JSON value, or a whole training config: model.activation_checkpointing_target, "
                 "on when fsdp_config.activation_checkpointing is true)")
      ->type_name("FILE");
}

void AddConfigOption(CLI::App& app, Options& o) {
  app.add_option("--merge-into", o.merge_into,
                 "with --emit-ckpt-config OUT.yaml: write OUT.yaml as this llm-foundry training "
                 "YAML with model.activation_checkpointing_target and "
                 "fsdp_config.activation_checkpointing set, every other line (comments "
                 "included) as it is; this file is not changed")
      ->type_name("TRAIN.yaml");
  app.add_option("--config", o.config,
                 "an llm-foundry training YAML, read as llm-foundry reads it: model.* checked "
                 "against the export, max_seq_len and device_train_microbatch_size as the token "
                 "input's dimensions, precision, the checkpointing target; keys given on the "
                 "command line win")
      ->type_name("FILE.yaml");
}

void AddGraphOptions(CLI::App& app, Options& o) {
  app.add_flag("--list-modules", o.list_modules,
               "print the module tree (path, class, --ckpt keys, nodes, parameter bytes) and exit");
  app.add_flag("--list-ops", o.list_ops,
               "print the operators foundry supports and exit (no model needed): one per line, "
               "those the importer rewrites into others with how in parentheses");
  cli::OneValueEach(
      app.add_option("--dim", o.dim_specs,
                     "bind a symbolic dimension, e.g. --dim batch=8 --dim seq=2048, or an "
                     "input's axis by position: --dim input_ids.1=2048")
          ->type_name("NAME=VALUE"));
  cli::OneValueEach(
      app.add_option("--input-shape", o.input_shape_specs,
                     "bind every symbolic dimension of an input by its shape, e.g. --input-shape "
                     "input_ids=8x2048 (also --dim INPUT.AXIS=N: --dim input_ids.1=2048)")
          ->type_name("INPUT=N1xN2..."));
  cli::OneValueEach(app.add_option("--freeze", o.freeze,
                                   "do not train parameters matching this glob (repeatable)")
                        ->type_name("GLOB"));
  cli::OneValueEach(app.add_option("--trainable", o.trainable,
                                   "also train initializers matching this glob (repeatable)")
                        ->type_name("GLOB"));
  app.add_flag("--forward-only", o.forward_only,
               "compile the forward graph only (no loss/backward)");
  app.add_flag("--no-attention-fusion", o.no_attention_fusion,
               "keep attention as exported (softmax and its seq x seq probabilities, saved for "
               "the backward) instead of fusing it into foundry::Attention");
  app.add_option("--precision", o.precision,
                 "amp_bf16: run the ops torch.autocast runs in bf16 (matrix products, attention) "
                 "in bf16 with f32 master weights, gradients and optimizer state, as "
                 "llm-foundry's `precision: amp_bf16`; fp32: everything in f32")
      ->type_name("P")
      ->capture_default_str();
  app.add_option("--grad-accum", o.grad_accum_text,
                 "microbatches per optimizer step (llm-foundry's global_train_batch_size / "
                 "device_train_microbatch_size): each gradient adds up in its own storage "
                 "across K runs of the compiled batch; the memory stays one microbatch's")
      ->type_name("K")
      ->capture_default_str();
  app.add_option("--world-size", o.world_size_text,
                 "plan one rank of N data-parallel ranks (foundry-run under mpirun -n N): the "
                 "memory plan, the report and --memory-budget are per rank; with --config, "
                 "global_train_batch_size / (N x device_train_microbatch_size) microbatches")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--sharding", o.sharding,
                 "with --world-size: FSDP's sharding_strategy, NO_SHARD (DDP), SHARD_GRAD_OP "
                 "(ZeRO-2), FULL_SHARD (ZeRO-3; the default, or --config's "
                 "fsdp_config.sharding_strategy), HYBRID_SHARD (planned only)")
      ->type_name("S");
  app.add_option("--fsdp-mixed-precision", o.mixed_precision,
                 "FSDP's mixed precision as llm-foundry's fsdp_config.mixed_precision sets it "
                 "under --precision amp_bf16: DEFAULT (parameters gathered and computed in bf16, "
                 "gradients reduced in f32), PURE (reduced in bf16 too), FULL (everything f32: "
                 "torch.autocast alone), or param_dtype=T,reduce_dtype=T,buffer_dtype=T; "
                 "default: --config's, else DEFAULT for an FSDP run (--world-size N >= 2 or a "
                 "--config with fsdp_config), else FULL")
      ->type_name("MP");
  app.add_option("--shard-group", o.shard_group_text,
                 "HYBRID_SHARD: ranks per shard group (GPUs per node)")
      ->type_name("G")
      ->capture_default_str();
  app.add_option("--link-gbps", o.link_gbps_text,
                 "with --world-size: each rank's interconnect bandwidth in gigabits per second "
                 "(e.g. 400 for 8x NVLink-era InfiniBand, 3200 for NVLink 4); the report then "
                 "bounds the time per step the collectives take")
      ->type_name("GBPS");
  app.add_option("--fold-limit", o.fold_limit_text,
                 "largest tensor constant folding may create, in bytes (bigger ones are "
                 "computed at run time)")
      ->type_name("BYTES")
      ->capture_default_str();
  app.add_option("--dump-after", o.dump_after,
                 "print the IR (text form) after this pass: fold, canonicalize, autocast, autodiff")
      ->type_name("PASS");
}

// What a PyTorch run holds that foundry's own would not: its loss's backward, autocast's weight
// copies.
void AddPyTorchRunOptions(CLI::App& app, Options& o) {
  app.add_option("--loss-fn", o.loss_fn,
                 "the cross-entropy whose backward the plan holds, as llm-foundry's "
                 "model.loss_fn names it: fused_crossentropy (foundry's fused loss; the default, "
                 "or --config's) or torch_crossentropy (PyTorch's nn.CrossEntropyLoss: "
                 "nll_loss's gradient, then log_softmax's, one more logits-sized f32 buffer)")
      ->type_name("L");
  app.add_option("--autocast-weight-copies", o.weight_copies,
                 "under --precision amp_bf16 with f32 parameters (FSDP mixed precision FULL, or "
                 "no FSDP): saved (the backward reads the forward's bf16 copy of each weight, as "
                 "torch.autocast's cache and autograd hold it; the default for an FSDP run) or "
                 "recast (the backward casts each weight again; less memory, the default "
                 "otherwise)")
      ->type_name("W");
}

void AddReportOptions(CLI::App& app, Options& o) {
  app.add_option("--dump-plan", o.dump_plan,
                 "write the memory plan as readable text to FILE (schedule, "
                 "offsets, aliases, workspace, totals)")
      ->type_name("FILE");
  app.add_option("--report-json", o.report_json,
                 "write the memory report (bytes per storage class, saved-for-backward bytes per "
                 "module, flops) as JSON; training only")
      ->type_name("FILE");
  app.add_option(
         "--memory-timeline", o.memory_timeline,
         "draw live memory across the schedule, by kind and phase, as an SVG; training only")
      ->type_name("FILE.svg");
}

// --ckpt and --ckpt-config: parsed (and the config read) before the import, so a typo costs
// nothing. nullopt: go on; otherwise the exit status, the error printed.
std::optional<int> ParseCkpt(const Options& o, const std::optional<TrainConfig>& config,
                             CompileRequest& request) {
  for (const auto& spec : o.ckpt_specs) {
    auto t = ParseCkptArg(spec);
    if (!t.ok()) return Fail(t.status().message(), cli::kExitUsage);
    request.ckpt_targets.push_back(*t);
  }
  // The file's checkpointing and precision: --ckpt-config's, or --config's.
  std::optional<CkptConfig> file;
  std::string option, path;
  if (!o.ckpt_config.empty()) {
    auto read = ReadCkptConfig(o.ckpt_config);
    if (!read.ok()) return Fail(read.status().message());
    file = *read;
    option = "--ckpt-config";
    path = o.ckpt_config;
  } else if (config) {
    file = config->ckpt;
    file->precision = config->precision;
    option = "--config";
    path = o.config;
  }
  if (file) {
    for (const auto& w : file->warnings) std::cerr << kTool << ": warning: " << w << "\n";
    if (file->precision) {
      // llm-foundry's `precision:` applies unless the command line names one.
      auto precision = ParsePrecision(*file->precision);
      if (!o.precision_given) {
        if (!precision.ok())
          return Fail(option + " " + path + ": key 'precision': " + precision.status().message() +
                      " (or give --precision to override the file)");
        request.precision = *precision;
      } else if (!precision.ok() || *precision != request.precision) {
        std::cerr << kTool << ": warning: --precision " << o.precision << " overrides " << path
                  << "'s precision: " << *file->precision << "\n";
      }
    }
    // --config's target gives way to --ckpt and --memory-budget on the command line.
    const bool overridden =
        option == "--config" && (!o.ckpt_specs.empty() || !o.memory_budget_text.empty());
    if (overridden && file->enabled)
      std::cerr << kTool << ": warning: " << (o.ckpt_specs.empty() ? "--memory-budget" : "--ckpt")
                << " overrides " << path << "'s activation checkpointing\n";
    if (file->enabled && !overridden)
      request.ckpt_targets.insert(request.ckpt_targets.end(), file->targets.begin(),
                                  file->targets.end());
  }
  if (!request.ckpt_targets.empty() && o.forward_only)
    return Fail("--ckpt and --ckpt-config checkpoint a training step; drop --forward-only",
                cli::kExitUsage);
  return std::nullopt;
}

// An FSDP run: several ranks, or a --config with an fsdp_config (llm-foundry runs FSDP). Its
// defaults are llm-foundry's: mixed precision DEFAULT, a device reserve, autocast's saved copies.
bool IsFsdpRun(const CompileRequest& request, const std::optional<TrainConfig>& config) {
  return request.world_size > 1 || (config && config->has_fsdp_config);
}

// --memory-budget and the files that describe a checkpointing.
// What a GPU holds that no plan sees, by default, for a per-GPU answer: a CUDA context with
// cuBLAS loaded is about half a GiB, NCCL's buffers for a ring of 8 a few hundred MiB more, and the
// caching allocator rounds each block; 1 GiB is stated, not measured (docs/memory-report.md).
constexpr int64_t kDefaultDeviceReserve = int64_t{1} << 30;

std::optional<int> ParseBudget(const Options& o, const std::optional<TrainConfig>& config,
                               CompileRequest& request) {
  if (!o.device_reserve.empty()) {
    auto b = o.device_reserve == "0" ? StatusOr<int64_t>(0) : ParseByteSize(o.device_reserve);
    if (!b.ok()) return Fail("--device-reserve: " + b.status().message(), cli::kExitUsage);
    if (o.memory_budget_text.empty())
      return Fail("--device-reserve is taken off --memory-budget; give --memory-budget",
                  cli::kExitUsage);
    request.device_reserve = *b;
  } else if (!o.memory_budget_text.empty() &&
             IsFsdpRun(request, config)) {
    request.device_reserve = kDefaultDeviceReserve;
  }
  if (!o.memory_budget_text.empty()) {
    auto b = ParseByteSize(o.memory_budget_text);
    if (!b.ok()) return Fail("--memory-budget: " + b.status().message(), cli::kExitUsage);
    request.memory_budget = *b;
    request.memory_budget_text = o.memory_budget_text;
    if (o.forward_only)
      return Fail("--memory-budget plans a training step; drop --forward-only", cli::kExitUsage);
    if (!o.ckpt_specs.empty() || !o.ckpt_config.empty())
      return Fail("--memory-budget chooses the checkpointing itself; drop --ckpt / --ckpt-config",
                  cli::kExitUsage);
    request.ckpt_targets.clear();  // --config's, overridden
  }
  if (!o.ckpt_syntax.empty()) {
    auto syntax = ParseCkptSyntax(o.ckpt_syntax);
    if (!syntax.ok()) return Fail("--ckpt-syntax: " + syntax.status().message(), cli::kExitUsage);
    if (!request.memory_budget)
      return Fail("--ckpt-syntax says what --memory-budget may answer; give --memory-budget",
                  cli::kExitUsage);
    request.ckpt_syntax = *syntax;
  }
  if (!o.emit_ckpt_config.empty() && !request.memory_budget && request.ckpt_targets.empty())
    return Fail(
        "--emit-ckpt-config writes the checkpointing of --memory-budget or --ckpt; give one",
        cli::kExitUsage);
  if (!o.memory_frontier.empty() && !request.memory_budget)
    return Fail("--memory-frontier draws the --memory-budget search; give --memory-budget",
                cli::kExitUsage);
  if (!o.merge_into.empty() && o.emit_ckpt_config.empty())
    return Fail("--merge-into TRAIN.yaml needs --emit-ckpt-config OUT.yaml (the merged file)",
                cli::kExitUsage);
  if (!o.merge_into.empty() && !std::ifstream(o.merge_into, std::ios::binary))
    return Fail("--merge-into " + o.merge_into + ": cannot read the file");
  request.frontier = !o.memory_frontier.empty();
  request.ckpt_config = !o.emit_ckpt_config.empty();
  return std::nullopt;
}

// Every file this compile writes, declared and checked before the import (base/output_set.h): the
// -o pair (default: the model's stem in the current folder), --dump-plan and the report files;
// none may be another, the model or the --ckpt-config file. The library compares the -o pair
// with the model's external data besides.
std::optional<int> ParseOutputs(Options& o, CompileRequest& request, OutputSet& outputs) {
  if (o.list_modules) return std::nullopt;  // prints, writes nothing
  if (!o.output_given && !o.dry_run) o.prefix = fs::path(o.model).stem().string();
  if (o.dump_plan_given && o.forward_only)
    return Fail("--dump-plan needs the training graph; drop --forward-only", cli::kExitUsage);
  auto add = [&](Status st) -> std::optional<int> {
    if (!st.ok()) return Fail(st.message());
    return std::nullopt;
  };
  if (auto code = add(outputs.AddInput(o.model, "the model, an input of this command")))
    return code;
  if (auto code =
          add(outputs.AddInput(o.ckpt_config, "the --ckpt-config file, an input of this command")))
    return code;
  if (auto code = add(outputs.AddInput(o.config, "the --config file, an input of this command")))
    return code;
  if (auto code = add(outputs.AddInput(o.merge_into,
                                       "the --merge-into file, an input of this command "
                                       "(the merged YAML is written to --emit-ckpt-config)")))
    return code;
  // Report files may go into the folder -o makes.
  const OutputSet::FileOptions report{/*special=*/true, /*make_parents=*/true};
  if (!o.dry_run) {
    auto paths = CompiledOutputPaths(o.prefix);
    if (!paths.ok()) return Fail(paths.status().message(), cli::kExitUsage);
    const OutputSet::FileOptions pair{/*special=*/false, /*make_parents=*/true};
    for (const std::string& path : {paths->graph, paths->data, paths->plan, paths->init})
      if (auto code = add(outputs.AddFile(path, "-o", pair))) return code;
    request.output_prefix = o.prefix;
  }
  if (o.dump_plan_given) {
    if (auto code = add(outputs.AddFile(o.dump_plan, "--dump-plan", report))) return code;
    request.outputs.push_back({o.dump_plan, "--dump-plan FILE"});
  }
  for (const OutputFile& f : o.ReportFiles())
    if (!f.path.empty()) {
      if (auto code = add(outputs.AddFile(f.path, f.option.substr(0, f.option.find(' ')), report)))
        return code;
      request.outputs.push_back(f);
    }
  return std::nullopt;
}

// The ranks of a data-parallel plan: --world-size, --shard-group, --link-gbps and the sharding
// strategy (--sharding, else the --config file's fsdp_config.sharding_strategy).
std::optional<int> ParseRanks(Options& o, const std::optional<TrainConfig>& config,
                              CompileRequest& request) {
  auto world = cli::ParseInteger<int64_t>("--world-size", o.world_size_text, 1, 1 << 16,
                                          "a number of ranks");
  if (!world.ok()) return Fail(world.status().message(), cli::kExitUsage);
  request.world_size = *world;
  auto group = cli::ParseInteger<int64_t>("--shard-group", o.shard_group_text, 1, 1 << 16,
                                          "a number of ranks");
  if (!group.ok()) return Fail(group.status().message(), cli::kExitUsage);
  request.shard_group = *group;
  if (!o.link_gbps_text.empty()) {
    char* end = nullptr;
    o.link_gbps = std::strtod(o.link_gbps_text.c_str(), &end);
    if (end == o.link_gbps_text.c_str() || *end != '\0' || !(o.link_gbps > 0) || o.link_gbps > 1e6)
      return Fail("--link-gbps " + o.link_gbps_text +
                      ": give the link's bandwidth in gigabits per second, a number above 0 "
                      "(e.g. 400)",
                  cli::kExitUsage);
    if (*world == 1)
      return Fail(
          "--link-gbps bounds the time of the collectives between ranks; give "
          "--world-size N (N >= 2)",
          cli::kExitUsage);
  }
  {
    std::string strategy = o.sharding;
    if (strategy.empty() && config && config->fsdp.count("sharding_strategy"))
      strategy = config->fsdp.at("sharding_strategy");
    if (strategy.empty()) strategy = "FULL_SHARD";
    auto parsed = ParseSharding(strategy);
    if (!parsed)
      return Fail("--sharding " + strategy + ": give " + ShardingNames() + " (FSDP's names)",
                  cli::kExitUsage);
    if (!o.sharding.empty() && *world == 1)
      return Fail("--sharding " + o.sharding + " shards over ranks; give --world-size N (N >= 2)",
                  cli::kExitUsage);
    request.sharding = *parsed;
  }
  return std::nullopt;
}

// FSDP's mixed precision: --fsdp-mixed-precision, else --config's fsdp_config.mixed_precision,
// else llm-foundry's default (DEFAULT) when the run is an FSDP run (several ranks, or a --config
// with an fsdp_config), else FULL: torch.autocast alone, as a run without FSDP has it.
std::optional<int> ParseMixedPrecision(Options& o, const std::optional<TrainConfig>& config,
                                       CompileRequest& request) {
  std::string spec = o.mixed_precision, source = "--fsdp-mixed-precision";
  if (spec.empty() && config && config->fsdp.count("mixed_precision")) {
    spec = config->fsdp.at("mixed_precision");
    source = "--config " + o.config + ": fsdp_config.mixed_precision";
  }
  const bool fsdp = IsFsdpRun(request, config);
  if (spec.empty()) spec = fsdp ? "DEFAULT" : "FULL";
  const DType compute =
      request.precision == Precision::kAmpBf16 ? DType::kBFloat16 : DType::kFloat32;
  auto mp = ParseFsdpMixedPrecision(spec, compute);
  if (!mp.ok()) return Fail(source + ": " + mp.status().message(), cli::kExitUsage);
  if (o.forward_only && !o.mixed_precision.empty())
    return Fail("--fsdp-mixed-precision is about training; drop it with --forward-only",
                cli::kExitUsage);
  request.mixed_precision = *mp;
  o.mixed_precision = mp->name;
  return std::nullopt;
}

// The loss: --loss-fn, else --config's model.loss_fn, else llm-foundry's default. Autocast's
// weight copies: --autocast-weight-copies, else saved for an FSDP run, else recast.
std::optional<int> ParsePyTorchRunOptions(Options& o, const std::optional<TrainConfig>& config,
                                     CompileRequest& request) {
  std::string name = o.loss_fn, source = "--loss-fn";
  if (name.empty() && config && config->model.loss_fn) {
    name = *config->model.loss_fn;
    source = "--config " + o.config + ": model.loss_fn";
  }
  if (name.empty()) name = "fused_crossentropy";
  const std::optional<LossFn> loss_fn = ParseLossFn(name);
  if (!loss_fn)
    return Fail(source + " '" + name + "': give fused_crossentropy or torch_crossentropy",
                cli::kExitUsage);
  if (o.forward_only && !o.loss_fn.empty())
    return Fail("--loss-fn is about training; drop it with --forward-only", cli::kExitUsage);
  request.loss_fn = *loss_fn;
  o.loss_fn = name;
  if (!o.weight_copies.empty() && o.weight_copies != "saved" && o.weight_copies != "recast")
    return Fail("--autocast-weight-copies '" + o.weight_copies + "': give saved or recast",
                cli::kExitUsage);
  const bool fsdp = IsFsdpRun(request, config);
  request.save_autocast_weight_copies = o.weight_copies.empty() ? fsdp : o.weight_copies == "saved";
  return std::nullopt;
}

// Everything known from the command line alone, in the order the checks are made.
std::optional<int> ParseRequest(Options& o, const std::optional<TrainConfig>& config,
                                CompileRequest& request, OutputSet& outputs) {
  auto dims = cli::ParseDims(o.dim_specs);
  if (!dims.ok()) return Fail(dims.status().message(), cli::kExitUsage);
  auto fold_limit = cli::ParseInteger<int64_t>("--fold-limit", o.fold_limit_text, 1, INT64_MAX,
                                               "a positive number of bytes");
  if (!fold_limit.ok()) return Fail(fold_limit.status().message(), cli::kExitUsage);
  int threads = AvailableCpus();
  if (!o.threads_text.empty()) {
    auto parsed = cli::ParseInteger<int>("--threads", o.threads_text, 1, 1024, "a thread count");
    if (!parsed.ok()) return Fail(parsed.status().message(), cli::kExitUsage);
    threads = *parsed;
  }
  SetCpuThreads(threads);
  if (o.output_given && o.dry_run)
    return Fail("-o PREFIX and --dry-run contradict each other; drop one", cli::kExitUsage);
  auto precision = ParsePrecision(o.precision);
  if (!precision.ok()) return Fail("--precision: " + precision.status().message(), cli::kExitUsage);
  request.precision = *precision;
  auto grad_accum = cli::ParseInteger<int64_t>("--grad-accum", o.grad_accum_text, 1, 1 << 20,
                                               "a number of microbatches");
  if (!grad_accum.ok()) return Fail(grad_accum.status().message(), cli::kExitUsage);
  request.grad_accumulation = *grad_accum;
  if (auto code = ParseRanks(o, config, request)) return code;
  if (config && config->global_train_batch_size && !o.forward_only) {
    // global_train_batch_size / (N x device_train_microbatch_size) microbatches per optimizer
    // step on each of N ranks; --grad-accum given too wins.
    auto k = AccumulationSteps(*config, request.world_size);
    if (!k.ok()) return Fail(k.status().message());
    if (o.grad_accum_given && *k != *grad_accum)
      std::cerr << kTool << ": warning: --grad-accum " << *grad_accum << " overrides " << o.config
                << "'s global_train_batch_size / device_train_microbatch_size (" << *k << ")\n";
    else
      request.grad_accumulation = *k;
  }
  request.model = o.model;
  request.dims = *dims;
  request.fold_limit_bytes = *fold_limit;
  request.freeze = o.freeze;
  request.trainable = o.trainable;
  request.training = !o.forward_only;
  request.fuse_attention = !o.no_attention_fusion;
  request.dump_after = o.dump_after;
  if (!o.config.empty() && !o.ckpt_config.empty())
    return Fail(
        "--config and --ckpt-config both give the checkpointing; drop --ckpt-config (--config "
        "reads the same keys)",
        cli::kExitUsage);
  if (auto code = ParseCkpt(o, config, request)) return code;
  o.precision = std::string(PrecisionName(request.precision));  // the file's, when it set it
  if (auto code = ParseMixedPrecision(o, config, request)) return code;
  if (auto code = ParsePyTorchRunOptions(o, config, request)) return code;
  if (auto code = ParseBudget(o, config, request)) return code;
  return ParseOutputs(o, request, outputs);
}

// --input-shape and --dim INPUT.AXIS=N name axes by position: the model file says which
// dimension names those are (read only when one of them is used).
std::optional<int> ResolveDims(const Options& o, const std::optional<TrainConfig>& config,
                               CompileRequest& request) {
  auto shapes = cli::ParseInputShapes(o.input_shape_specs);
  if (!shapes.ok()) return Fail(shapes.status().message(), cli::kExitUsage);
  bool positional = !shapes->empty();
  for (const auto& [name, size] : request.dims) positional |= name.find('.') != std::string::npos;
  const bool from_config = config && (config->device_train_microbatch_size || config->max_seq_len ||
                                      config->model.max_seq_len);
  if (!positional && !from_config) return std::nullopt;
  auto files = InspectModelFile(o.model);
  if (!files.ok()) return Fail(files.status().message());
  auto dims = ResolveInputDims(*files, request.dims, *shapes);
  if (!dims.ok()) return Fail(dims.status().message());
  request.dims = *dims;
  if (from_config) {
    auto bound = BindConfigDims(*config, *files, request.dims);
    if (!bound.ok()) return Fail(bound.status().message());
    for (const auto& line : bound->notes) std::cerr << kTool << ": warning: " << line << "\n";
    request.dims = bound->dims;
  }
  return std::nullopt;
}

// --list-modules, on the imported model.
int PrintModules(const Graph& graph, const std::string& model) {
  if (graph.modules.empty())
    return Fail("'" + model +
                "' carries no module annotations; export it with models/export_mpt.py "
                "(--annotations scopes or functions), or with torch.onnx.export(..., "
                "export_modules_as_functions=...) / torch >= 2.5's dynamo exporter");
  std::cout << FormatModuleTree(ListModules(graph));
  return 0;
}

// The --emit-ckpt-config file, headed by the command that chose the selection, --precision
// included: a budget answer holds in the precision it was planned in. (Not a `precision:` key: the
// snippet is pasted into a training YAML that has its own.)
// Without --merge-into it is a fragment, to be merged into a training YAML (appended, its
// `model:` would replace the file's whole model section): it says so in its second line.
StatusOr<std::string> EmittedConfig(const Options& o, const CompileResult& result) {
  std::string command = "foundry-compile " + o.model + " --precision " + o.precision;
  if (o.mixed_precision != "FULL") command += " --fsdp-mixed-precision " + o.mixed_precision;
  if (o.loss_fn != "fused_crossentropy") command += " --loss-fn " + o.loss_fn;
  if (!o.weight_copies.empty()) command += " --autocast-weight-copies " + o.weight_copies;
  if (result.budget)
    command += " --memory-budget " + o.memory_budget_text + ": " + BudgetLine(*result.budget);
  else
    for (const auto& t : result.selection->targets) command += " --ckpt " + t;
  const CkptConfigText& config = *result.ckpt_config;
  if (!o.merge_into.empty()) {
    if (config.every_block_by_flag)
      return Error("--merge-into " + o.merge_into +
                   ": the answer is fsdp_config.activation_checkpointing: true with no "
                   "model.activation_checkpointing_target (a non-MPT model), which --merge-into "
                   "does not write; set the flag by hand, or drop --merge-into for the fragment");
    std::ifstream in(o.merge_into, std::ios::binary);
    if (!in) return Error("--merge-into " + o.merge_into + ": cannot read the file");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string note = "set by " + EscapeName(command);
    for (const auto& w : config.warnings) note += "; warning: " + EscapeName(w);
    for (const auto& n : config.notes) note += "; note: " + EscapeName(n);
    return MergeCkptIntoYaml(text, o.merge_into, config.yaml, note);
  }
  std::string file = CkptConfigFile(command, config);
  const size_t first = file.find('\n') + 1;
  file.insert(first,
              "# A fragment: merge it into the training YAML (OmegaConf.merge, or foundry-compile "
              "... --emit-ckpt-config OUT.yaml --merge-into TRAIN.yaml); appended as it is, its "
              "model: would replace the YAML's whole model section.\n"
              "# note: llm-foundry reads activation_checkpointing_target in the training YAML's "
              "model section and activation_checkpointing in its fsdp_config section (both under "
              "the top level), as written here.\n");
  return file;
}

// The report JSON with a "sharding" object: the strategy, the ranks, what one rank holds of the
// parameters and what it moves per optimizer step.
std::string WithShardingJson(const std::string& report, const CompileResult& result) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(report);
  const ShardStats& s = *result.shard;
  nlohmann::ordered_json sj;
  sj["strategy"] = ShardingName(s.strategy);
  sj["world_size"] = s.world_size;
  sj["shard_group"] = s.group;
  sj["units"] = s.units.size();
  sj["parameter_bytes_whole"] = s.full_param_bytes;
  sj["parameter_bytes_per_rank"] = s.shard_param_bytes;
  if (result.comm) {
    sj["microbatches_per_step"] = result.comm->runs;
    sj["gathers_per_microbatch"] = result.comm->gathers;
    sj["reductions_per_microbatch"] = result.comm->reductions;
    sj["gather_bytes_per_step"] = result.comm->gather_bytes * result.comm->runs;
    sj["reduce_bytes_per_step"] = result.comm->reduce_bytes * result.comm->runs;
    sj["communication_bytes_per_step"] = result.comm->PerStep();
  }
  if (result.smallest_world) {
    sj["fewest_ranks_for_budget"] = result.smallest_world->world_size;
    sj["fewest_ranks_total_bytes"] = result.smallest_world->total_bytes;
  }
  j["sharding"] = std::move(sj);
  return j.dump(2) + "\n";
}

// The report files, in ReportFiles() order, staged.
Status StageReportFiles(const Options& o, const CompileResult& result, OutputSet& outputs) {
  const std::vector<OutputFile> files = o.ReportFiles();
  for (size_t i = 0; i < files.size(); ++i) {
    if (files[i].path.empty()) continue;
    std::string text;
    if (i == 0) {
      text = MemoryReportJson(*result.report);
      if (result.shard) text = WithShardingJson(text, result);
    } else if (i == 1) {
      TimelineOptions timeline;
      if (result.plain_curve) timeline.extra_curves.push_back(*result.plain_curve);
      text = MemoryTimelineSvg(*result.report, timeline);
    } else if (i == 2) {
      ASSIGN_OR_RETURN(text, EmittedConfig(o, result));
    } else {
      text = MemoryFrontierSvg("planned memory against recompute: " + o.model,
                               result.frontier->frontier, result.frontier->uniform);
    }
    RETURN_IF_ERROR(outputs.Write(files[i].path, text));
  }
  return Status::Ok();
}

// A sharded plan's full initial parameters (ShardingPlan::init_file): the graph holds each rank's
// shard without data, so every rank reads its slice of these.
Status StageShardInit(const CompileResult& result, OutputSet& outputs) {
  ASSIGN_OR_RETURN(std::string staged, outputs.Stage(result.outputs->init));
  std::vector<std::pair<std::string, const Tensor*>> tensors;
  for (const auto& name : result.plan->parameters)
    if (auto it = result.shard_init.find(name); it != result.shard_init.end())
      tensors.emplace_back(name, it->second.get());
  return WriteSafetensors(staged, tensors, {{"format", "foundry-shard-init"}});
}

// The sharding lines of a plan for several ranks: what the pass did, what one rank holds, what it
// moves per step and, with --link-gbps, the least time that takes.
std::string FormatSharding(const Options& o, const CompileResult& result) {
  const ShardStats& s = *result.shard;
  std::ostringstream out;
  out << "sharding: " << ShardingName(s.strategy) << " over " << s.world_size << " ranks";
  if (s.group != s.world_size) out << " (shard groups of " << s.group << "; planned only)";
  if (s.strategy != ShardingStrategy::kNoShard)
    out << ", " << s.units.size() << " units (blocks and the root)";
  out << "; parameters " << HumanBytes(s.full_param_bytes) << " whole, "
      << HumanBytes(s.shard_param_bytes) << " on each rank\n";
  if (result.comm) {
    const CommVolume& c = *result.comm;
    out << "  communication per rank per optimizer step (" << c.runs << " microbatch"
        << (c.runs == 1 ? "" : "es") << " x " << c.gathers << " gathers + " << c.reductions
        << " gradient reductions): gathers " << HumanBytes(c.gather_bytes * c.runs)
        << ", reductions " << HumanBytes(c.reduce_bytes * c.runs) << ", total "
        << HumanBytes(c.PerStep()) << "\n";
    if (o.link_gbps > 0) {
      const double sec = c.Seconds(o.link_gbps);
      char buf[64];
      if (sec >= 1)
        std::snprintf(buf, sizeof buf, "%.3f s", sec);
      else if (sec >= 1e-3)
        std::snprintf(buf, sizeof buf, "%.3f ms", sec * 1e3);
      else
        std::snprintf(buf, sizeof buf, "%.3f us", sec * 1e6);
      out << "  at --link-gbps " << o.link_gbps_text << ": at least " << buf
          << " per step on the link (foundry runs each collective in the schedule, on the "
             "compute thread: nothing overlaps)\n";
    }
  }
  return out.str();
}

// The report, then every file staged and committed as one set: a failure anywhere leaves none.
int PrintAndWrite(const Options& o, CompileResult& result, OutputSet& outputs) {
  if (result.report) std::cout << FormatMemoryReport(*result.report);
  if (result.shard) std::cout << FormatSharding(o, result);
  if (result.smallest_world)
    std::cout << "  fewest ranks (powers of 2) at which --memory-budget " << o.memory_budget_text
              << " per rank fits: " << result.smallest_world->world_size
              << " (every block checkpointed: " << HumanBytes(result.smallest_world->total_bytes)
              << " per rank)\n";
  if (result.plan && result.plan->eval_memory && !result.plan->sharding)
    if (const BackendLayout* eval = result.plan->eval_memory->Layout("cpu")) {
      const BackendLayout* train = result.plan->memory.Layout("cpu");
      std::cout << "eval plan (forward only, foundry-run --eval-data): arena "
                << HumanBytes(eval->arena_bytes) << " (" << eval->arena_bytes << " B), "
                << (train && eval->arena_bytes <= train->arena_bytes
                        ? "run inside the training arena (no bytes added)"
                        : "larger than the training arena: allocated beside it")
                << "\n";
    }
  Status st = Status::Ok();
  if (o.dump_plan_given)
    st = outputs.Write(o.dump_plan, DumpMemoryPlan(result.graph, result.plan->memory));
  if (st.ok() && result.outputs)
    st = StageCompiledOutputs(result.graph, result.plan ? &*result.plan : nullptr, *result.outputs,
                              outputs);
  if (st.ok() && result.outputs && result.plan && result.plan->sharding &&
      !result.plan->sharding->init_file.empty())
    st = StageShardInit(result, outputs);
  if (st.ok()) st = StageReportFiles(o, result, outputs);
  if (st.ok()) st = outputs.Commit();
  if (!st.ok()) return Fail(st.message());
  if (o.dump_plan_given) std::cout << "wrote " << o.dump_plan << "\n";
  if (result.outputs && o.forward_only)
    std::cout << "wrote " << result.outputs->graph << "\n";
  else if (result.outputs && result.plan && result.plan->sharding &&
           !result.plan->sharding->init_file.empty())
    std::cout << "wrote " << result.outputs->graph << ", " << result.outputs->plan << " and "
              << result.outputs->init << " (the full initial parameters each rank shards)\n";
  else if (result.outputs)
    std::cout << "wrote " << result.outputs->graph << " and " << result.outputs->plan << "\n";
  for (const OutputFile& f : o.ReportFiles())
    if (!f.path.empty()) std::cout << "wrote " << f.path << "\n";
  if (!result.outputs) std::cout << "(--dry-run: no plan written)\n";
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app{
      "foundry-compile: compile an ONNX transformer into a training plan.\n"
      "Writes PREFIX.train.onnx (the training graph: forward, loss, backward) and PREFIX.plan."};
  app.footer(
      "Exit status: 0 success; 2 a wrong command line (unknown option, bad or out-of-range "
      "value);\n"
      "1 an error in the input. Every error is one line `foundry-compile: error: ...` on stderr.");
  Options o;
  AddModelOptions(app, o);
  AddCkptOptions(app, o);
  AddGraphOptions(app, o);
  AddPyTorchRunOptions(app, o);
  AddConfigOption(app, o);
  AddReportOptions(app, o);
  // Let the model path be validated by the importer, which words the error itself.
  if (auto code = cli::Parse(app, argc, argv, kTool)) return *code;
  if (auto code = cli::RejectEmptyValues(app, kTool)) return *code;
  o.output_given = app.get_option("--output")->count() > 0;
  o.dump_plan_given = app.get_option("--dump-plan")->count() > 0;
  o.precision_given = app.get_option("--precision")->count() > 0;
  o.grad_accum_given = app.get_option("--grad-accum")->count() > 0;

  if (o.list_ops) {
    for (const OpSchema* s : OpSchemas().All())
      std::cout << (s->domain.empty() ? "" : s->domain + "::") << s->op_type << "\n";
    for (const LoweredOp& op : ImportLoweredOps())
      std::cout << op.op_type << "  (" << op.how << ")\n";
    return 0;
  }
  if (o.model.empty())
    return Fail("no model given: foundry-compile MODEL.onnx [-o PREFIX] (see --help)",
                cli::kExitUsage);
  CompileRequest request;
  OutputSet outputs;
  std::optional<TrainConfig> config;
  if (!o.config.empty()) {
    auto read = ReadTrainConfig(o.config);
    if (!read.ok()) return Fail(read.status().message());
    config = std::move(read).value();
  }
  if (auto code = ParseRequest(o, config, request, outputs)) return *code;
  if (config)
    if (std::string line = IgnoredKeysLine(*config); !line.empty())
      std::cerr << kTool << ": note: " << line << "\n";

  if (auto code = ResolveDims(o, config, request)) return *code;
  auto graph = ImportModel(request);
  if (!graph.ok()) return Fail(graph.status().message());
  if (config)
    if (Status st = CheckModelAgainstGraph(*config, *graph, nullptr); !st.ok())
      return Fail(st.message());
  if (o.list_modules) return PrintModules(*graph, o.model);
  for (const OutputFile& f : o.ReportFiles())
    if (!f.path.empty() && o.forward_only)
      return Fail(f.option.substr(0, f.option.find(' ')) +
                      " describes a training step; drop --forward-only",
                  cli::kExitUsage);

  request.log = request.dump = &std::cout;
  request.log_header = "foundry-compile " + o.model;
  request.warn = [](const std::string& w) { std::cerr << kTool << ": warning: " << w << "\n"; };
  auto result = CompileImported(request, std::move(graph).value());
  if (!result.ok()) return Fail(result.status().message());
  if (config && !o.forward_only) {
    // Now with the fused attention: the heads.
    std::vector<std::string> notes;
    if (Status st = CheckModelAgainstGraph(*config, result->graph, &notes); !st.ok())
      return Fail(st.message());
    for (const auto& n : notes) std::cerr << kTool << ": note: " << n << "\n";
  }
  return PrintAndWrite(o, *result, outputs);
}

}  // namespace

int main(int argc, char** argv) {
  return foundry::cli::RunMain(kTool, [&] { return Main(argc, argv); });
}
