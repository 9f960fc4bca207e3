#include "driver/compile.h"

#include <filesystem>

#include "base/bytes.h"
#include "base/file_util.h"
#include "compiler/eval_graph.h"
#include "compiler/model_files.h"
#include "compiler/onnx_import.h"
#include "kernels/cpu/kernel.h"
#include "passes/checkpoint_report.h"
#include "passes/memory_plan.h"
#include "passes/pipeline.h"
#include "runtime/cuda_backend.h"

namespace foundry {
namespace {

// What the steps share.
struct Compilation {
  const CompileRequest& request;
  CompileResult result;
  // Autodiff's output, kept with checkpointing or a budget: the search starts from it, and the
  // checkpoint report compares against its plan.
  std::optional<Graph> plain;
  ModelFiles files;                           // read in step 3 only
  std::map<std::string, Shape> shard_shapes;  // the sharded parameters' full shapes
};

// An output that would replace one of the compile's own inputs: the model or one of its external
// data files. Files are compared by (device, inode), so no spelling of a path slips through.
Status CheckOutputsSpareInputs(const std::vector<OutputFile>& outputs, const std::string& model,
                               const ModelFiles& files) {
  std::vector<OutputFile> existing;
  for (const auto& out : outputs)
    if (GetFileId(out.path)) existing.push_back(out);
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

// Step 3: only when the caller will write a file is the model file read a second time.
Status CheckOutputs(Compilation& c) {
  const CompileRequest& r = c.request;
  std::vector<OutputFile> outputs;
  if (!r.output_prefix.empty()) {
    ASSIGN_OR_RETURN(c.result.outputs, CompiledOutputPaths(r.output_prefix));
    for (const std::string& path :
         {c.result.outputs->data, c.result.outputs->graph, c.result.outputs->plan})
      outputs.push_back({path, "-o PREFIX"});
  }
  outputs.insert(outputs.end(), r.outputs.begin(), r.outputs.end());
  if (outputs.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(c.files, InspectModelFile(r.model));
  return CheckOutputsSpareInputs(outputs, r.model, c.files);
}

ShardPass::Options ShardOptions(const CompileRequest& r) {
  return ShardPass::Options{r.world_size, r.sharding, r.shard_group, r.mixed_precision.reduce,
                            r.mixed_precision.param};
}

// What the shard pass among `passes`, when one ran, says of the sharded parameters.
void KeepShardResult(Compilation& c, const std::vector<std::unique_ptr<Pass>>& passes) {
  for (const auto& pass : passes) {
    if (pass->name() != "shard") continue;
    const auto& shard = static_cast<const ShardPass&>(*pass);
    c.result.shard = shard.stats();
    c.result.shard_init = shard.initial_values();
    c.shard_shapes = shard.full_shapes();
  }
}

// One graph run per optimizer step keeps the gradients in the arena (compiler/memory_plan.h).
PlanMemoryOptions PlanOptions(const CompileRequest& r) { return {r.grad_accumulation == 1}; }

// The backward reads the forward's bf16 weight copies (torch.autocast's cache) when asked and the
// weights are computed from f32 parameters; with FSDP's bf16 parameters (DEFAULT, PURE) the
// backward reads the parameters the shard pass gathers again, whatever the option.
AutocastRecastPass::Options RecastOptions(const CompileRequest& r) {
  return {r.save_autocast_weight_copies && r.mixed_precision.param == DType::kFloat32};
}

// The post-autodiff passes' options as the request gives them, with `instances` checkpointed.
PostAutodiffOptions PostAutodiff(const CompileRequest& r, std::vector<std::string> instances) {
  return {{std::move(instances)}, r.precision, ShardOptions(r), RecastOptions(r)};
}

// Step 4.
Status RunPipeline(Compilation& c) {
  const CompileRequest& r = c.request;
  CompileOptions options;
  options.fold.dims = r.dims;
  options.fold.max_folded_bytes = r.fold_limit_bytes;
  options.parameters.freeze = r.freeze;
  options.parameters.trainable = r.trainable;
  options.training = r.training;
  options.canonicalize.fuse_attention = r.fuse_attention;
  options.autocast.precision = r.precision;
  options.autocast.param_dtype = r.mixed_precision.param;
  options.autocast.buffer_dtype = r.mixed_precision.buffer;
  options.grad_accumulation = r.grad_accumulation;
  options.loss.loss_fn = r.loss_fn;
  options.recast = RecastOptions(r);
  if (r.training) options.shard = ShardOptions(r);
  if (c.result.selection)
    for (const auto& instance : c.result.selection->instances)
      options.remat.instances.push_back(instance.module);
  PipelineOptions pipeline;
  pipeline.log = r.log;
  pipeline.dump_after = r.dump_after;
  pipeline.dump = r.dump;
  if (c.result.selection || r.memory_budget)
    pipeline.after_pass = [&c](std::string_view pass, const Graph& g) {
      // The search and the plain plan start from the last of these (after the accumulation
      // nodes with --grad-accum).
      if (pass == "autodiff" || pass == "loss_backward" || pass == "grad_accumulate") c.plain = g;
    };
  if (r.log && !r.log_header.empty()) *r.log << r.log_header << "\n";
  const auto passes = BuildPipeline(options);
  RETURN_IF_ERROR(RunPasses(c.result.graph, passes, pipeline));
  KeepShardResult(c, passes);
  return Status::Ok();
}

// Step 5: the search from autodiff's output; a non-empty choice is checkpointed as --ckpt with
// the chosen targets would be, an empty one drops the plain graph (the pipeline's graph is then
// the plan).
// What the plans must fit: the budget less the device reserve.
int64_t PlanBudget(const CompileRequest& r) { return *r.memory_budget - r.device_reserve; }

// " less a device reserve of 1.0 GiB", or "" without a reserve.
std::string ReserveNote(const CompileRequest& r) {
  return r.device_reserve > 0 ? " less a device reserve of " + HumanBytes(r.device_reserve) : "";
}

// The fewest ranks, doubling from 1 up to 4096, at which the request's sharding fits the smallest
// plan (every block checkpointed) into the budget per rank; nullopt when none does (NO_SHARD keeps
// everything on every rank, so only N = 1 is tried). The doubling stops once a rank's plan shrinks
// by less than 1 % (the activations, which sharding does not divide, dominate it): `*last` is then
// the last one planned.
StatusOr<std::optional<CompileResult::WorldFit>> SmallestWorld(const Compilation& c,
                                                               CompileResult::WorldFit* last) {
  const CompileRequest& r = c.request;
  std::vector<std::string> blocks;
  for (const BlockLayer& l : CheckpointableLayers(*c.plain)) blocks.push_back(l.block);
  const int64_t most = r.sharding == ShardingStrategy::kNoShard ? 1 : 4096;
  for (int64_t n = 1; n <= most; n *= 2) {
    ShardPass::Options shard = ShardOptions(r);
    shard.world_size = n;
    if (r.sharding == ShardingStrategy::kHybridShard && n < 2 * r.shard_group) {
      shard.strategy = ShardingStrategy::kFullShard;  // one group: FULL_SHARD over the ranks
    }
    CkptEvaluator evaluator(*c.plain, r.precision, shard, RecastOptions(r));
    ASSIGN_OR_RETURN(CkptEvaluation e, evaluator.Evaluate(blocks));
    if (e.total_bytes <= PlanBudget(r))
      return std::optional<CompileResult::WorldFit>(CompileResult::WorldFit{n, e.total_bytes});
    const bool shrinking = last->world_size == 0 || e.total_bytes < last->total_bytes * 0.99;
    *last = CompileResult::WorldFit{n, e.total_bytes};
    if (!shrinking) break;
  }
  return std::optional<CompileResult::WorldFit>();
}

Status ApplyMemoryBudget(Compilation& c) {
  const CompileRequest& r = c.request;
  if (PlanBudget(r) <= 0)
    return Error("--memory-budget " + r.memory_budget_text + ": the budget is not above the " +
                 "device reserve, " + HumanBytes(r.device_reserve) +
                 "; give a larger budget, or a smaller --device-reserve");
  CkptEvaluator evaluator(*c.plain, r.precision, ShardOptions(r), RecastOptions(r));
  BudgetOptions search;
  search.budget_bytes = PlanBudget(r);
  search.syntax = r.ckpt_syntax;
  auto searched = ChooseCheckpointing(evaluator, search);
  CompileResult::WorldFit last;
  if (!searched.ok() || r.world_size > 1) {
    ASSIGN_OR_RETURN(c.result.smallest_world, SmallestWorld(c, &last));
  }
  if (!searched.ok()) {
    std::string hint;
    if (const auto& fit = c.result.smallest_world)
      hint = "; it fits on " + std::to_string(fit->world_size) + " ranks: --world-size " +
             std::to_string(fit->world_size) + " --sharding " +
             std::string(ShardingName(r.sharding)) + " plans " + HumanBytes(fit->total_bytes) +
             " per rank with every block checkpointed";
    else if (r.sharding == ShardingStrategy::kNoShard)
      hint =
          "; NO_SHARD keeps every byte on every rank: more ranks do not help (try --sharding "
          "FULL_SHARD)";
    else
      hint = "; more ranks do not fit it: at " + std::to_string(last.world_size) + " ranks " +
             std::string(ShardingName(r.sharding)) + " still plans " +
             HumanBytes(last.total_bytes) +
             " per rank with every block checkpointed (the activations are not sharded)";
    return Error("--memory-budget " + r.memory_budget_text + ReserveNote(r) + ": " +
                 searched.status().message() + hint);
  }
  ASSIGN_OR_RETURN(BudgetChoice choice, MakeBudgetChoice(*c.plain, *searched, *r.memory_budget,
                                                         r.ckpt_syntax, r.device_reserve));
  if (r.device_reserve > 0)
    choice.config.notes.push_back("planned against the budget less a device reserve of " +
                                  HumanBytes(r.device_reserve) +
                                  " (foundry-compile --device-reserve: the CUDA context, cuBLAS "
                                  "and NCCL buffers, allocator rounding)");
  if (r.world_size > 1)  // the answer holds for these ranks and this sharding only
    choice.config.notes.push_back(
        "planned per GPU for one of " + std::to_string(r.world_size) + " ranks with fsdp_config." +
        "sharding_strategy: " + std::string(ShardingName(r.sharding)) +
        " (foundry-compile --world-size " + std::to_string(r.world_size) + " --sharding " +
        std::string(ShardingName(r.sharding)) + ") and fsdp_config.mixed_precision " +
        r.mixed_precision.name + " (" + MixedPrecisionDTypes(r.mixed_precision) +
        "); on fewer ranks, another strategy or another mixed precision the answer may not fit");
  if (r.log) *r.log << FormatBudgetChoice(choice);
  if (r.frontier) {
    ASSIGN_OR_RETURN(c.result.frontier, MemoryFrontier(evaluator, *searched, r.ckpt_syntax));
  }
  c.result.budget_search = std::move(searched).value();
  c.result.ckpt_config = choice.config;
  c.result.budget = choice;
  if (choice.config.empty()) {
    c.plain.reset();
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(c.result.selection, SelectCkptTargets(*c.plain, choice.config.targets));
  // As a --ckpt compile runs it, and as the search planned it.
  Graph checkpointed = *c.plain;
  PipelineOptions tail;
  tail.log = r.log;
  ASSIGN_OR_RETURN(auto passes, RunPostAutodiffPasses(
                                    checkpointed, PostAutodiff(r, choice.chosen.instances), tail));
  KeepShardResult(c, passes);
  c.result.graph = std::move(checkpointed);
  return Status::Ok();
}

// Step 6.
Status SelectionConfig(Compilation& c) {
  std::vector<std::string> instances;
  for (const auto& i : c.result.selection->instances) instances.push_back(i.module);
  ASSIGN_OR_RETURN(c.result.ckpt_config, SelectionAsConfig(*c.plain, instances));
  return Status::Ok();
}

// What the plan file says besides the memory plan.
void DescribePlan(Compilation& c, Plan& plan) {
  Graph& graph = c.result.graph;
  if (c.result.outputs)
    plan.graph_file = std::filesystem::path(c.result.outputs->graph).filename().string();
  plan.source_model = c.request.model;
  plan.loss = graph.metadata["foundry.loss"];
  plan.loss_in_model = graph.metadata.count("foundry.loss_appended") == 0;
  plan.inputs = graph.inputs;
  plan.parameters = graph.parameters;
  for (size_t i = 0; i < graph.parameters.size(); ++i)
    plan.gradients[graph.parameters[i]] = graph.outputs[i + 1];
  plan.dims = c.request.dims;
  plan.grad_accumulation = c.request.grad_accumulation;
  for (const auto& in : plan.inputs)
    if (c.files.input_dims.count(in)) plan.input_dims[in] = c.files.input_dims.at(in);
  if (c.result.shard) {
    ShardingPlan s;
    s.world_size = c.result.shard->world_size;
    s.strategy = std::string(ShardingName(c.result.shard->strategy));
    s.shard_group = c.result.shard->group;
    for (const auto& [name, shape] : c.shard_shapes) {
      int64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      s.parameters[name] = ShardedParameter{shape, ShardElements(numel, s.shard_group)};
    }
    if (!c.result.shard_init.empty() && c.result.outputs)
      s.init_file = std::filesystem::path(c.result.outputs->init).filename().string();
    plan.sharding = std::move(s);
  }
}

// Step 7, with checkpointing: the plain graph scheduled and planned (cpu only: the report is the
// cpu layout's), its report's curve for the timeline, and what checkpointing changed against it.
StatusOr<CheckpointReport> CompareWithPlain(Compilation& c, const MemoryPlan& memory) {
  const CompileRequest& r = c.request;
  // The plain plan of the same rank. Without the recast: the plain plan the checkpoint report
  // has always compared against.
  PostAutodiffOptions plain = PostAutodiff(r, {});
  plain.precision = Precision::kFp32;
  RETURN_IF_ERROR(RunPostAutodiffPasses(*c.plain, plain).status());
  ASSIGN_OR_RETURN(MemoryPlan plain_memory,
                   PlanMemory(*c.plain, {{"cpu", CpuWorkspaceBytes}}, PlanOptions(r)));
  ASSIGN_OR_RETURN(MemoryReport plain_report,
                   BuildMemoryReport(*c.plain, plain_memory, "cpu", r.model, r.dims));
  c.result.plain_curve = PlainTimelineCurve(plain_report);
  return BuildCheckpointReport(*c.plain, plain_memory, c.result.graph, memory, *c.result.selection);
}

// Step 7: a layout for every backend this foundry has kernels for (cpu, and cuda when built);
// the report shows the cpu one, foundry-run --device picks its own.
Status PlanAndReport(Compilation& c) {
  const CompileRequest& r = c.request;
  Plan plan;
  ASSIGN_OR_RETURN(plan.memory, PlanMemory(c.result.graph, CompiledBackendSpecs(), PlanOptions(r)));
  ASSIGN_OR_RETURN(MemoryReport report,
                   BuildMemoryReport(c.result.graph, plan.memory, "cpu", r.model, r.dims));
  if (c.plain) {
    ASSIGN_OR_RETURN(report.checkpoint, CompareWithPlain(c, plan.memory));
  }
  if (r.memory_budget && !report.checkpoint) {  // the plain plan fits: nothing checkpointed
    CheckpointReport none;
    none.saved_before_bytes = none.saved_after_bytes = report.saved_for_backward_bytes;
    none.step_flops = report.flops.forward + report.flops.backward;
    report.checkpoint = none;
  }
  if (r.memory_budget) report.checkpoint->budget_bytes = *r.memory_budget;
  report.budget = c.result.budget;
  DescribePlan(c, plan);
  if (r.world_size > 1)
    c.result.comm = CommunicationPerStep(c.result.graph, r.world_size, r.grad_accumulation);
  // The forward-only eval plan over the same graph and weights (compiler/eval_graph.h).
  ASSIGN_OR_RETURN(Graph eval, EvalGraph(c.result.graph, plan.loss));
  ASSIGN_OR_RETURN(plan.eval_memory, PlanMemory(eval, CompiledBackendSpecs()));
  c.result.plan = std::move(plan);
  c.result.report = std::move(report);
  return Status::Ok();
}

// What the CLI rules out before it calls, for every other caller.
Status CheckRequest(const CompileRequest& r) {
  if (r.memory_budget && !r.ckpt_targets.empty())
    return Error("--memory-budget chooses the checkpointing itself; drop --ckpt / --ckpt-config");
  if (!r.training && (r.memory_budget || !r.ckpt_targets.empty()))
    return Error(
        "--memory-budget, --ckpt and --ckpt-config plan a training step; drop "
        "--forward-only");
  if (r.grad_accumulation < 1)
    return Error("--grad-accum " + std::to_string(r.grad_accumulation) +
                 ": microbatches per optimizer step must be 1 or more");
  if (!r.training && r.grad_accumulation > 1)
    return Error("--grad-accum accumulates a training step's gradients; drop --forward-only");
  if (r.world_size < 1)
    return Error("--world-size " + std::to_string(r.world_size) + ": give 1 or more ranks");
  if (!r.training && r.world_size > 1)
    return Error("--world-size plans a rank of a training step; drop --forward-only");
  return Status::Ok();
}

}  // namespace

StatusOr<Graph> ImportModel(const CompileRequest& request) {
  ImportOptions options;
  options.dims = request.dims;
  return ImportOnnx(request.model, options);
}

StatusOr<CompileResult> CompileImported(const CompileRequest& request, Graph model) {
  RETURN_IF_ERROR(CheckRequest(request));
  if (auto w = model.metadata.find(kImportWarningKey);
      w != model.metadata.end() && request.training && request.warn)
    request.warn(w->second);
  Compilation c{request, {}, std::nullopt, {}};
  c.result.graph = std::move(model);
  if (!request.ckpt_targets.empty()) {
    ASSIGN_OR_RETURN(c.result.selection, SelectCkptTargets(c.result.graph, request.ckpt_targets));
  }
  RETURN_IF_ERROR(CheckOutputs(c));
  if (Status st = RunPipeline(c); !st.ok()) {
    auto re = c.result.graph.metadata.find(kRespecialisedDimsKey);
    if (re == c.result.graph.metadata.end()) return st;
    return Error(st.message() + " (the bindings change sizes torch specialised at export, " +
                 re->second +
                 ": a constant of the graph holds the traced size; re-export with a "
                 "dynamic torch.export.Dim, or keep the exported size)");
  }
  if (request.memory_budget) {
    RETURN_IF_ERROR(ApplyMemoryBudget(c));
  } else if (c.result.selection && request.ckpt_config) {
    RETURN_IF_ERROR(SelectionConfig(c));
  }
  if (request.training) RETURN_IF_ERROR(PlanAndReport(c));
  return std::move(c.result);
}

StatusOr<CompileResult> Compile(const CompileRequest& request) {
  ASSIGN_OR_RETURN(Graph model, ImportModel(request));
  return CompileImported(request, std::move(model));
}

}  // namespace foundry
