#include "passes/pipeline.h"

#include <algorithm>

#include "compiler/text.h"
#include "compiler/verifier.h"
#include "passes/canonicalize.h"

namespace foundry {

Status RunPasses(Graph& graph, const std::vector<std::unique_ptr<Pass>>& passes,
                 const PipelineOptions& options) {
  bool dumped = options.dump_after.empty();
  bool typed = std::none_of(passes.begin(), passes.end(),
                            [](const auto& pass) { return pass->name() == "fold"; });
  for (const auto& pass : passes) {
    ASSIGN_OR_RETURN(bool changed, pass->Run(graph));
    if (options.log) {
      std::string stats = pass->Stats();
      *options.log << "  " << pass->name() << ": " << (stats.empty() ? "done" : stats) << "\n";
    }
    typed |= pass->name() == "fold";
    if (changed && options.verify && typed) {
      Status st = VerifyGraph(graph);
      if (!st.ok())
        return Error("internal error after pass '" + std::string(pass->name()) +
                     "': " + st.message());
    }
    if (options.after_pass) options.after_pass(pass->name(), graph);
    if (!dumped && pass->name() == options.dump_after && options.dump) {
      *options.dump << PrintGraph(graph);
      dumped = true;
    }
  }
  if (!dumped) {
    std::string names;
    for (const auto& pass : passes)
      names += (names.empty() ? "" : ", ") + std::string(pass->name());
    return Error("--dump-after " + options.dump_after + ": no such pass (passes: " + names + ")");
  }
  return Status::Ok();
}

std::vector<std::unique_ptr<Pass>> BuildPipeline(const CompileOptions& options) {
  std::vector<std::unique_ptr<Pass>> passes;
  if (options.training) passes.push_back(std::make_unique<ParametersPass>(options.parameters));
  passes.push_back(std::make_unique<FoldPass>(options.fold));
  passes.push_back(std::make_unique<CanonicalizePass>(options.canonicalize));
  if (options.autocast.precision != Precision::kFp32)
    passes.push_back(std::make_unique<AutocastPass>(options.autocast));
  if (options.training) {
    passes.push_back(std::make_unique<AutodiffPass>(options.autodiff));
    if (options.loss.loss_fn != LossFn::kFusedCrossEntropy)
      passes.push_back(std::make_unique<LossBackwardPass>(options.loss));
    if (options.grad_accumulation > 1)
      passes.push_back(std::make_unique<GradAccumulatePass>(
          GradAccumulatePass::Options{options.grad_accumulation}));
    for (auto& pass : PostAutodiffPasses(
             {options.remat, options.autocast.precision, options.shard, options.recast}))
      passes.push_back(std::move(pass));
  }
  return passes;
}

std::vector<std::unique_ptr<Pass>> PostAutodiffPasses(const PostAutodiffOptions& options) {
  std::vector<std::unique_ptr<Pass>> passes;
  if (!options.remat.instances.empty())
    passes.push_back(std::make_unique<RematPass>(options.remat));
  // After remat: the recompute clones' weight reads get their casts too (passes/autocast.h).
  if (options.precision != Precision::kFp32)
    passes.push_back(std::make_unique<AutocastRecastPass>(options.recast));
  // After every pass that adds readers of the parameters (passes/shard.h).
  if (options.shard.world_size > 1) passes.push_back(std::make_unique<ShardPass>(options.shard));
  passes.push_back(std::make_unique<SchedulePass>());
  return passes;
}

StatusOr<std::vector<std::unique_ptr<Pass>>> RunPostAutodiffPasses(
    Graph& graph, const PostAutodiffOptions& options, const PipelineOptions& pipeline) {
  std::vector<std::unique_ptr<Pass>> passes = PostAutodiffPasses(options);
  RETURN_IF_ERROR(RunPasses(graph, passes, pipeline));
  return passes;
}

}  // namespace foundry
