// foundry-compile: reads an exported model, builds the training graph and writes the plan.
// A thin main: option parsing here, everything else in the libraries.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <tuple>

#include "base/file_util.h"
#include "compiler/ckpt_targets.h"
#include "compiler/model_files.h"
#include "compiler/module_tree.h"
#include "compiler/onnx_export.h"
#include "compiler/onnx_import.h"
#include "compiler/op_schema.h"
#include "compiler/plan.h"
#include "kernels/cpu/kernel.h"
#include "passes/checkpoint_report.h"
#include "passes/ckpt_budget.h"
#include "passes/fold.h"
#include "passes/memory_plan.h"
#include "passes/memory_report.h"
#include "passes/memory_timeline.h"
#include "passes/pipeline.h"
#include "runtime/cuda_backend.h"
#include "tools/cli.h"

namespace fs = std::filesystem;
using namespace foundry;

namespace {

constexpr const char* kTool = "foundry-compile";

int Fail(const std::string& message, int code = cli::kExitError) {
  return cli::Fail(kTool, message, code);
}

// An output that would replace one of the compile's own inputs: the model or one of its external
// data files. Files are compared by (device, inode), so no spelling of a path slips through.
// `outputs`: each output path with the option that names it ("-o PREFIX", "--dump-plan FILE").
Status CheckOutputsSpareInputs(const std::vector<std::pair<std::string, std::string>>& outputs,
                               const std::string& model, const ModelFiles& files) {
  std::vector<std::pair<std::string, std::string>> existing;
  for (const auto& out : outputs)
    if (GetFileId(out.first)) existing.push_back(out);
  const std::optional<FileId> model_id = GetFileId(model);
  for (const auto& [path, option] : existing)
    if (GetFileId(path) == model_id)
      return Error("output '" + path + "' is the input model; choose another " + option);
  for (const auto& data : files.external_data) {
    std::optional<FileId> id = GetFileId(data);
    if (!id) continue;
    for (const auto& [path, option] : existing)
      if (GetFileId(path) == id)
        return Error("output '" + path + "' is the external data file '" + data +
                     "' of the input model; choose another " + option);
  }
  return Status::Ok();
}

// The --emit-ckpt-config file: the selection as the two keys of an llm-foundry training config
// that switch it on (or off, when nothing needs checkpointing), which --ckpt-config reads back.
std::string CkptConfigFile(const std::string& comment, const CkptConfigText& config) {
  std::string out = "# " + comment + "\n";
  if (config.yaml.empty()) return out + "fsdp_config:\n  activation_checkpointing: false\n";
  return out + "model:\n  activation_checkpointing_target: " + config.yaml +
         "\nfsdp_config:\n  activation_checkpointing: true\n";
}

// The selections --memory-frontier draws: the cheapest plan for budgets spread evenly from the
// plain plan's total down to the smallest plan (every block), Pareto-filtered, and llm-foundry's
// uniform targets on every layer.
StatusOr<std::pair<std::vector<FrontierPoint>, std::vector<FrontierPoint>>> Frontier(
    const CkptEvaluator& evaluator, const BudgetResult& first) {
  auto percent = [](const CkptEvaluation& e) {
    return e.step_flops > 0 ? 100.0 * double(e.flops_recomputed) / double(e.step_flops) : 0.0;
  };
  std::vector<FrontierPoint> uniform;
  int64_t lo = INT64_MAX, hi = 0;
  for (const CkptEvaluation& e : first.uniform) {
    lo = std::min(lo, e.total_bytes);
    hi = std::max(hi, e.total_bytes);
    if (e.label.find('=') == std::string::npos)
      uniform.push_back({e.total_bytes, percent(e), e.label});
  }
  constexpr int kBudgets = 12;
  std::vector<CkptEvaluation> chosen;
  for (int k = 0; k <= kBudgets; ++k) {
    BudgetOptions o;
    o.budget_bytes = lo + (hi - lo) * k / kBudgets;
    auto r = ChooseCheckpointing(evaluator, o);
    if (!r.ok()) return r.status();
    chosen.push_back(r->chosen);
  }
  std::sort(chosen.begin(), chosen.end(), [](const auto& a, const auto& b) {
    return a.total_bytes != b.total_bytes ? a.total_bytes < b.total_bytes
                                          : a.flops_recomputed < b.flops_recomputed;
  });
  std::vector<FrontierPoint> frontier;
  for (const CkptEvaluation& e : chosen)  // the Pareto set: each cheaper than every smaller one
    if (frontier.empty() || percent(e) < frontier.back().recompute_percent)
      frontier.push_back({e.total_bytes, percent(e), ""});
  return std::make_pair(frontier, uniform);
}

// What --memory-budget writes besides the plan: the --emit-ckpt-config text and the frontier.
struct BudgetOutputs {
  std::string config_file;
  std::string frontier_svg;
};

// --memory-budget: searches from autodiff's output `plain`, prints the choice (as llm-foundry
// config, beside the cheapest fitting uniform target). A non-empty choice makes `graph` the
// checkpointed, scheduled training graph and `selection` its targets; an empty one resets `plain`
// (`graph` is then the plain plan the pipeline made).
StatusOr<BudgetOutputs> ApplyMemoryBudget(const std::string& model, const std::string& budget_text,
                                          int64_t budget, bool frontier,
                                          std::optional<Graph>& plain, Graph& graph,
                                          std::optional<CkptSelection>& selection) {
  BudgetOutputs out;
  CkptEvaluator evaluator(*plain);
  BudgetOptions search;
  search.budget_bytes = budget;
  auto chosen = ChooseCheckpointing(evaluator, search);
  if (!chosen.ok())
    return Error("--memory-budget " + budget_text + ": " + chosen.status().message());
  ASSIGN_OR_RETURN(CkptConfigText config, SelectionAsConfig(*plain, chosen->chosen.instances));
  const CkptEvaluation& c = chosen->chosen;
  auto percent = [](const CkptEvaluation& e) {
    return e.step_flops > 0 ? 100.0 * double(e.flops_recomputed) / double(e.step_flops) : 0.0;
  };
  char line[256];
  std::snprintf(line, sizeof line,
                "planned total %s (%lld B) <= budget %s (%lld B), recompute %.2f %% of the step; "
                "%d plans evaluated",
                HumanBytes(c.total_bytes).c_str(), static_cast<long long>(c.total_bytes),
                HumanBytes(budget).c_str(), static_cast<long long>(budget), percent(c),
                chosen->plans);
  std::cout << "memory budget: " << line << "\n";
  if (config.yaml.empty())
    std::cout << "  the plain plan fits: nothing to checkpoint (llm-foundry: "
                 "fsdp_config.activation_checkpointing: false)\n";
  else
    std::cout << "  activation_checkpointing_target: " << config.yaml << "\n";
  for (const auto& w : config.warnings) std::cout << "  note: " << w << "\n";
  // What a hand-picked uniform target would have cost (the search evaluates them all).
  const CkptEvaluation* uniform = nullptr;
  for (const CkptEvaluation& u : chosen->uniform)
    if (u.total_bytes <= budget &&
        (!uniform || std::tie(u.flops_recomputed, u.nodes_recomputed) <
                         std::tie(uniform->flops_recomputed, uniform->nodes_recomputed)))
      uniform = &u;
  if (uniform) {
    char cost[128];
    std::snprintf(cost, sizeof cost, "%.2f %% of the step, planned total %s", percent(*uniform),
                  HumanBytes(uniform->total_bytes).c_str());
    std::cout << "  cheapest uniform llm-foundry target that fits: " << uniform->label << ", "
              << cost << "\n";
  }
  out.config_file = CkptConfigFile(
      "foundry-compile " + model + " --memory-budget " + budget_text + ": " + line, config);
  if (frontier) {
    ASSIGN_OR_RETURN(auto points, Frontier(evaluator, *chosen));
    out.frontier_svg = MemoryFrontierSvg("planned memory against recompute: " + model, points.first,
                                         points.second);
  }
  if (config.yaml.empty()) {
    plain.reset();
    return out;
  }
  ASSIGN_OR_RETURN(selection, SelectCkptTargets(*plain, config.targets));
  Graph checkpointed = *plain;
  std::vector<std::unique_ptr<Pass>> passes;
  passes.push_back(std::make_unique<RematPass>(RematPass::Options{c.instances}));
  passes.push_back(std::make_unique<SchedulePass>());
  PipelineOptions tail;
  tail.log = &std::cout;
  RETURN_IF_ERROR(RunPasses(checkpointed, passes, tail));
  graph = std::move(checkpointed);
  return out;
}

int Main(int argc, char** argv) {
  CLI::App app{
      "foundry-compile: compile an ONNX transformer into a training plan.\n"
      "Writes PREFIX.train.onnx (the training graph: forward, loss, backward) and PREFIX.plan."};
  app.footer(
      "Exit status: 0 success; 2 a wrong command line (unknown option, bad or out-of-range "
      "value);\n"
      "1 an error in the input. Every error is one line `foundry-compile: error: ...` on stderr.");
  std::string model;
  std::string prefix;
  bool list_modules = false, list_ops = false, forward_only = false;
  std::vector<std::string> dim_specs, freeze, trainable;
  std::string fold_limit_text = std::to_string(int64_t{1} << 20);
  std::string dump_after, dump_plan;
  app.add_option("model", model, "the exported model (.onnx)");
  auto* o_output = app.add_option("-o,--output", prefix,
                                  "output prefix: writes PREFIX.train.onnx and PREFIX.plan "
                                  "(default: the model's file stem, in the current folder)");
  bool dry_run = false;
  app.add_flag("--dry-run", dry_run, "compile and print the report, but write no plan");
  std::vector<std::string> ckpt_specs;
  std::string ckpt_config;
  cli::OneValueEach(
      app.add_option("--ckpt", ckpt_specs,
                     "checkpoint these modules (repeatable): an llm-foundry "
                     "activation_checkpointing_target name (mptblock, grouped_query_attention, "
                     "mptmlp, ...), a class name, a module-path glob (transformer.blocks.*.attn), "
                     "a child of every block (attn) or `block`; =LAYERS picks layers as "
                     "llm-foundry's target_blocks: 3 (the first 3), first-2,last-1, middle-2, "
                     "range-0-4, [0,2,5]")
          ->type_name("NAME[=LAYERS]"));
  std::string memory_budget_text, emit_ckpt_config, memory_frontier;
  app.add_option("--memory-budget", memory_budget_text,
                 "choose what to checkpoint: the fewest recompute FLOPs whose planned training "
                 "step fits in SIZE (bytes, or KiB/MiB/GiB/TiB, KB/MB/GB/TB: 20GiB); prints the "
                 "choice as llm-foundry config")
      ->type_name("SIZE");
  app.add_option("--emit-ckpt-config", emit_ckpt_config,
                 "write the checkpointing chosen by --memory-budget (or given by --ckpt) as "
                 "llm-foundry config, which --ckpt-config reads back")
      ->type_name("FILE");
  app.add_option("--memory-frontier", memory_frontier,
                 "draw planned total against recompute FLOPs for budgets from nothing "
                 "checkpointed to every block, with llm-foundry's uniform targets marked")
      ->type_name("FILE.svg");
  app.add_option("--ckpt-config", ckpt_config,
                 "read the targets from an llm-foundry activation_checkpointing_target (a YAML or "
                 "JSON value, or a whole training config: model.activation_checkpointing_target, "
                 "on when fsdp_config.activation_checkpointing is true)")
      ->type_name("FILE");
  app.add_flag("--list-modules", list_modules,
               "print the module tree (path, class, --ckpt keys, nodes, parameter bytes) and exit");
  app.add_flag("--list-ops", list_ops,
               "print the operators foundry supports and exit (no model needed)");
  cli::OneValueEach(app.add_option("--dim", dim_specs,
                                   "bind a symbolic dimension, e.g. --dim batch=8 --dim seq=2048")
                        ->type_name("NAME=VALUE"));
  cli::OneValueEach(
      app.add_option("--freeze", freeze, "do not train parameters matching this glob (repeatable)")
          ->type_name("GLOB"));
  cli::OneValueEach(app.add_option("--trainable", trainable,
                                   "also train initializers matching this glob (repeatable)")
                        ->type_name("GLOB"));
  app.add_flag("--forward-only", forward_only, "compile the forward graph only (no loss/backward)");
  app.add_option("--fold-limit", fold_limit_text,
                 "largest tensor constant folding may create, in bytes (bigger ones are "
                 "computed at run time)")
      ->type_name("BYTES")
      ->capture_default_str();
  app.add_option("--dump-after", dump_after,
                 "print the IR (text form) after this pass: fold, canonicalize, autodiff")
      ->type_name("PASS");
  auto* o_dump_plan = app.add_option("--dump-plan", dump_plan,
                                     "write the memory plan as readable text to FILE (schedule, "
                                     "offsets, aliases, workspace, totals)")
                          ->type_name("FILE");
  std::string report_json, memory_timeline;
  app.add_option("--report-json", report_json,
                 "write the memory report (bytes per storage class, saved-for-backward bytes per "
                 "module, flops) as JSON; training only")
      ->type_name("FILE");
  app.add_option(
         "--memory-timeline", memory_timeline,
         "draw live memory across the schedule, by kind and phase, as an SVG; training only")
      ->type_name("FILE.svg");
  // Let the model path be validated by the importer, which words the error itself.
  if (auto code = cli::Parse(app, argc, argv, kTool)) return *code;

  if (list_ops) {
    for (const OpSchema* s : OpSchemas().All())
      std::cout << (s->domain.empty() ? "" : s->domain + "::") << s->op_type << "\n";
    return 0;
  }
  if (model.empty())
    return Fail("no model given: foundry-compile MODEL.onnx [-o PREFIX] (see --help)",
                cli::kExitUsage);

  auto dims = cli::ParseDims(dim_specs);
  if (!dims.ok()) return Fail(dims.status().message(), cli::kExitUsage);
  auto fold_limit = cli::ParseInteger<int64_t>("--fold-limit", fold_limit_text, 1, INT64_MAX,
                                               "a positive number of bytes");
  if (!fold_limit.ok()) return Fail(fold_limit.status().message(), cli::kExitUsage);
  if (o_output->count() && dry_run)
    return Fail("-o PREFIX and --dry-run contradict each other; drop one", cli::kExitUsage);
  // Checkpoint targets: parsed before the import, so a typo costs nothing.
  std::vector<CkptTarget> ckpt_targets;
  for (const auto& spec : ckpt_specs) {
    auto t = ParseCkptArg(spec);
    if (!t.ok()) return Fail(t.status().message(), cli::kExitUsage);
    ckpt_targets.push_back(*t);
  }
  if (!ckpt_config.empty()) {
    auto config = ReadCkptConfig(ckpt_config);
    if (!config.ok()) return Fail(config.status().message());
    for (const auto& w : config->warnings) std::cerr << kTool << ": warning: " << w << "\n";
    if (config->enabled)
      ckpt_targets.insert(ckpt_targets.end(), config->targets.begin(), config->targets.end());
  }
  if (!ckpt_targets.empty() && forward_only)
    return Fail("--ckpt and --ckpt-config checkpoint a training step; drop --forward-only",
                cli::kExitUsage);
  std::optional<int64_t> budget;
  if (!memory_budget_text.empty()) {
    auto b = ParseByteSize(memory_budget_text);
    if (!b.ok()) return Fail("--memory-budget: " + b.status().message(), cli::kExitUsage);
    budget = *b;
    if (forward_only)
      return Fail("--memory-budget plans a training step; drop --forward-only", cli::kExitUsage);
    if (!ckpt_specs.empty() || !ckpt_config.empty())
      return Fail("--memory-budget chooses the checkpointing itself; drop --ckpt / --ckpt-config",
                  cli::kExitUsage);
  }
  if (!emit_ckpt_config.empty() && !budget && ckpt_targets.empty())
    return Fail(
        "--emit-ckpt-config writes the checkpointing of --memory-budget or --ckpt; give one",
        cli::kExitUsage);
  if (!memory_frontier.empty() && !budget)
    return Fail("--memory-frontier draws the --memory-budget search; give --memory-budget",
                cli::kExitUsage);

  // Without -o the outputs go to the current folder under the model's stem (never over the
  // input: CheckOutputsSpareInputs below compares files, not names).
  if (!o_output->count() && !dry_run) prefix = fs::path(model).stem().string();
  std::optional<CompiledOutputs> outputs;
  if (!dry_run) {
    auto paths = CompiledOutputPaths(prefix);
    if (!paths.ok()) return Fail(paths.status().message(), cli::kExitUsage);
    outputs = *paths;
  }
  if (o_dump_plan->count() && forward_only)
    return Fail("--dump-plan needs the training graph; drop --forward-only", cli::kExitUsage);
  if (o_dump_plan->count() && outputs) {
    for (const std::string& path : {outputs->graph, outputs->data, outputs->plan})
      if (fs::path(path).lexically_normal() == fs::path(dump_plan).lexically_normal())
        return Fail("--dump-plan " + dump_plan + " is also an output of -o " + prefix +
                        "; choose another FILE",
                    cli::kExitUsage);
  }

  ImportOptions import_options;
  import_options.dims = *dims;
  auto graph = ImportOnnx(model, import_options);
  if (!graph.ok()) return Fail(graph.status().message());

  if (list_modules) {
    if (graph->modules.empty())
      return Fail("'" + model +
                  "' carries no module annotations; export it with models/export_mpt.py "
                  "(--annotations scopes or functions), or with torch.onnx.export(..., "
                  "export_modules_as_functions=...) / torch >= 2.5's dynamo exporter");
    std::cout << FormatModuleTree(ListModules(*graph));
    return 0;
  }
  if (auto w = graph->metadata.find(kImportWarningKey); w != graph->metadata.end() && !forward_only)
    std::cerr << "foundry-compile: warning: " << w->second << "\n";

  const std::vector<std::pair<std::string, std::string>> report_files = {
      {report_json, "--report-json FILE"},
      {memory_timeline, "--memory-timeline FILE.svg"},
      {emit_ckpt_config, "--emit-ckpt-config FILE"},
      {memory_frontier, "--memory-frontier FILE.svg"}};
  for (const auto& [path, option] : report_files)
    if (!path.empty() && forward_only)
      return Fail(
          option.substr(0, option.find(' ')) + " describes a training step; drop --forward-only",
          cli::kExitUsage);

  std::optional<CkptSelection> selection;
  if (!ckpt_targets.empty()) {
    auto selected = SelectCkptTargets(*graph, ckpt_targets);
    if (!selected.ok()) return Fail(selected.status().message());
    selection = std::move(selected).value();
  }

  ModelFiles model_files;
  if (outputs || o_dump_plan->count() ||
      std::any_of(report_files.begin(), report_files.end(),
                  [](const auto& f) { return !f.first.empty(); })) {
    auto files = InspectModelFile(model);
    if (!files.ok()) return Fail(files.status().message());
    model_files = std::move(files).value();
    std::vector<std::pair<std::string, std::string>> paths;
    if (outputs)
      for (const std::string& path : {outputs->data, outputs->graph, outputs->plan})
        paths.emplace_back(path, "-o PREFIX");
    if (o_dump_plan->count()) paths.emplace_back(dump_plan, "--dump-plan FILE");
    for (const auto& [path, option] : report_files)
      if (!path.empty()) paths.emplace_back(path, option);
    Status st = CheckOutputsSpareInputs(paths, model, model_files);
    if (!st.ok()) return Fail(st.message());
  }

  CompileOptions options;
  options.fold.dims = *dims;
  options.fold.max_folded_bytes = *fold_limit;
  options.parameters.freeze = freeze;
  options.parameters.trainable = trainable;
  options.training = !forward_only;
  PipelineOptions pipeline;
  pipeline.log = &std::cout;
  pipeline.dump_after = dump_after;
  pipeline.dump = &std::cout;
  // With checkpointing, the plain training graph (autodiff's output) is planned beside the
  // checkpointed one: the report says what checkpointing changed against it.
  std::optional<Graph> plain;
  if (selection) {
    for (const auto& instance : selection->instances)
      options.remat.instances.push_back(instance.module);
  }
  if (selection || budget)
    pipeline.after_pass = [&](std::string_view pass, const Graph& g) {
      if (pass == "autodiff") plain = g;
    };

  std::cout << "foundry-compile " << model << "\n";
  Status st = RunPasses(*graph, BuildPipeline(options), pipeline);
  if (!st.ok()) return Fail(st.message());

  // --memory-budget: search from autodiff's output, then checkpoint the choice as --ckpt would.
  std::string emitted_config, frontier_svg;
  if (budget) {
    auto outputs = ApplyMemoryBudget(model, memory_budget_text, *budget, !memory_frontier.empty(),
                                     plain, *graph, selection);
    if (!outputs.ok()) return Fail(outputs.status().message());
    emitted_config = outputs->config_file;
    frontier_svg = outputs->frontier_svg;
  } else if (selection && !emit_ckpt_config.empty()) {
    std::vector<std::string> instances;
    for (const auto& i : selection->instances) instances.push_back(i.module);
    auto config = SelectionAsConfig(*plain, instances);
    if (!config.ok()) return Fail(config.status().message());
    std::string command = "foundry-compile " + model;
    for (const auto& t : selection->targets) command += " --ckpt " + t;
    emitted_config = CkptConfigFile(command, *config);
  }

  Plan plan;
  // The memory plan and its report: printed after every training compile; the report files are
  // written last, so a failed -o pair leaves none behind.
  std::optional<MemoryReport> report;
  TimelineOptions timeline;
  if (!forward_only) {
    // A layout for every backend this foundry has kernels for (cpu, and cuda when built): the
    // report shows the cpu one, foundry-run --device picks its own.
    auto memory = PlanMemory(*graph, CompiledBackendSpecs());
    if (!memory.ok()) return Fail(memory.status().message());
    plan.memory = std::move(memory).value();
    auto built = BuildMemoryReport(*graph, plan.memory, "cpu", model, *dims);
    if (!built.ok()) return Fail(built.status().message());
    report = std::move(built).value();
    if (plain) {
      SchedulePass schedule;
      auto scheduled = schedule.Run(*plain);
      if (!scheduled.ok()) return Fail(scheduled.status().message());
      auto plain_memory = PlanMemory(*plain, {{"cpu", CpuWorkspaceBytes}});
      if (!plain_memory.ok()) return Fail(plain_memory.status().message());
      auto plain_report = BuildMemoryReport(*plain, *plain_memory, "cpu", model, *dims);
      if (!plain_report.ok()) return Fail(plain_report.status().message());
      auto ckpt = BuildCheckpointReport(*plain, *plain_memory, *graph, plan.memory, *selection);
      if (!ckpt.ok()) return Fail(ckpt.status().message());
      report->checkpoint = std::move(ckpt).value();
      timeline.extra_curves.push_back(PlainTimelineCurve(*plain_report));
    }
    if (budget && !report->checkpoint) {  // the plain plan fits: nothing checkpointed
      CheckpointReport none;
      none.saved_before_bytes = none.saved_after_bytes = report->saved_for_backward_bytes;
      none.step_flops = report->flops.forward + report->flops.backward;
      report->checkpoint = none;
    }
    if (budget) report->checkpoint->budget_bytes = *budget;
    std::cout << FormatMemoryReport(*report);
  }
  if (o_dump_plan->count()) {
    st = WriteFileAtomic(dump_plan, DumpMemoryPlan(*graph, plan.memory));
    if (!st.ok()) return Fail(st.message());
    std::cout << "wrote " << dump_plan << "\n";
  }
  auto write_report_files = [&]() -> Status {
    for (size_t i = 0; i < report_files.size(); ++i) {
      const std::string& path = report_files[i].first;
      if (path.empty()) continue;
      const std::string text = i == 0   ? MemoryReportJson(*report)
                               : i == 1 ? MemoryTimelineSvg(*report, timeline)
                               : i == 2 ? emitted_config
                                        : frontier_svg;
      RETURN_IF_ERROR(WriteFileAtomic(path, text));
      std::cout << "wrote " << path << "\n";
    }
    return Status::Ok();
  };

  if (!outputs) {
    if (Status w = write_report_files(); !w.ok()) return Fail(w.message());
    std::cout << "(--dry-run: no plan written)\n";
    return 0;
  }
  if (!forward_only) {
    plan.graph_file = fs::path(outputs->graph).filename().string();
    plan.source_model = model;
    plan.loss = graph->metadata["foundry.loss"];
    plan.loss_in_model = graph->metadata.count("foundry.loss_appended") == 0;
    plan.inputs = graph->inputs;
    plan.parameters = graph->parameters;
    for (size_t i = 0; i < graph->parameters.size(); ++i)
      plan.gradients[graph->parameters[i]] = graph->outputs[i + 1];
    plan.dims = *dims;
    for (const auto& in : plan.inputs)
      if (model_files.input_dims.count(in)) plan.input_dims[in] = model_files.input_dims.at(in);
  }
  st = WriteCompiledOutputs(*graph, forward_only ? nullptr : &plan, prefix);
  if (!st.ok()) return Fail(st.message());
  if (forward_only)
    std::cout << "wrote " << outputs->graph << "\n";
  else
    std::cout << "wrote " << outputs->graph << " and " << outputs->plan << "\n";
  if (Status w = write_report_files(); !w.ok()) return Fail(w.message());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return foundry::cli::RunMain(kTool, [&] { return Main(argc, argv); });
}
