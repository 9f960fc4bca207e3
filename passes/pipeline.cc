#include "passes/pipeline.h"

#include "compiler/text.h"
#include "compiler/verifier.h"
#include "passes/canonicalize.h"

namespace foundry {

Status RunPasses(Graph& graph, const std::vector<std::unique_ptr<Pass>>& passes,
                 const PipelineOptions& options) {
  bool dumped = options.dump_after.empty();
  bool typed = false;
  for (const auto& pass : passes) {
    ASSIGN_OR_RETURN(bool changed, pass->Run(graph));
    if (options.log) {
      std::string stats = pass->Stats();
      *options.log << "  " << pass->name() << ": " << (stats.empty() ? "done" : stats) << "\n";
    }
    // The verifier checks types, which exist from fold (type inference) on; the passes before
    // it (parameters) change no node.
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
    if (options.grad_accumulation > 1)
      passes.push_back(std::make_unique<GradAccumulatePass>(
          GradAccumulatePass::Options{options.grad_accumulation}));
    if (!options.remat.instances.empty())
      passes.push_back(std::make_unique<RematPass>(options.remat));
    if (options.autocast.precision != Precision::kFp32)
      passes.push_back(std::make_unique<AutocastRecastPass>());
    if (options.shard.world_size > 1) passes.push_back(std::make_unique<ShardPass>(options.shard));
    passes.push_back(std::make_unique<SchedulePass>());
  }
  return passes;
}

}  // namespace foundry
