// Orders the passes: parameters (the trainable set; training only) -> fold (bind dims, infer,
// fold) -> canonicalize -> autodiff -> loss_backward (with --loss-fn torch_crossentropy) ->
// grad_accumulate (with --grad-accum K > 1), then the
// post-autodiff passes (training only): remat (when instances are selected) -> autocast recast
// (amp_bf16) -> shard (with --world-size N > 1) -> schedule. The verifier runs after every pass
// that changed the graph; the IR can be dumped after a named pass.
//
// The post-autodiff passes run again from the graph grad_accumulate (or autodiff) left: once per
// selection the --memory-budget search plans (passes/ckpt_budget.h), once for the selection it
// chose, and for the plain plan a checkpoint report compares against. PostAutodiffPasses is the
// one place their order is written, RunPasses the one place they are verified.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "passes/autocast.h"
#include "passes/autodiff.h"
#include "passes/canonicalize.h"
#include "passes/fold.h"
#include "passes/grad_accumulate.h"
#include "passes/loss_backward.h"
#include "passes/parameters.h"
#include "passes/pass.h"
#include "passes/remat.h"
#include "passes/schedule.h"
#include "passes/shard.h"

namespace foundry {

struct PipelineOptions {
  bool verify = true;
  std::string dump_after;  // pass name; its output IR goes to `dump`
  std::ostream* dump = nullptr;
  std::ostream* log = nullptr;  // one line of statistics per pass
  // Called after each pass with its name and the graph it left (e.g. to keep the plain training
  // graph, after autodiff, beside the checkpointed one).
  std::function<void(std::string_view pass, const Graph& graph)> after_pass;
};

// Runs `passes` in order; the verifier checks the graph after each one that changed it. Types
// exist from fold (type inference) on: in a list holding fold the passes before it are not
// verified; a list without fold starts from a typed graph.
Status RunPasses(Graph& graph, const std::vector<std::unique_ptr<Pass>>& passes,
                 const PipelineOptions& options);

// What the passes after autodiff (and grad_accumulate) are told.
struct PostAutodiffOptions {
  RematPass::Options remat;                // no instances: no remat pass
  Precision precision = Precision::kFp32;  // amp_bf16: the autocast recast pass
  ShardPass::Options shard;                // above 1 rank: the shard pass
  AutocastRecastPass::Options recast;      // amp_bf16: how the backward gets its weight copies
};
// remat -> autocast recast -> shard -> schedule, each when its option asks for it.
std::vector<std::unique_ptr<Pass>> PostAutodiffPasses(const PostAutodiffOptions& options);
// RunPasses over PostAutodiffPasses(options); returns the passes run (the shard pass's
// statistics and full shapes are read from it).
StatusOr<std::vector<std::unique_ptr<Pass>>> RunPostAutodiffPasses(
    Graph& graph, const PostAutodiffOptions& options, const PipelineOptions& pipeline = {});

struct CompileOptions {
  ParametersPass::Options parameters;
  FoldPass::Options fold;
  CanonicalizePass::Options canonicalize;
  AutocastPass::Options autocast;  // fp32: no autocast pass
  AutodiffPass::Options autodiff;
  LossBackwardPass::Options loss;  // torch_crossentropy: the loss_backward pass after autodiff
  RematPass::Options remat;  // no instances: no remat pass
  AutocastRecastPass::Options recast;
  bool training = true;      // false: forward graph only (fold + canonicalize)
  // Microbatches per optimizer step (foundry-compile --grad-accum): above 1, the grad_accumulate
  // pass runs right after autodiff.
  int64_t grad_accumulation = 1;
  // Sharded data parallelism (foundry-compile --world-size N --sharding S): above 1 rank, the
  // shard pass runs after remat and the recast, and makes the graph one rank's (passes/shard.h).
  ShardPass::Options shard;
};

std::vector<std::unique_ptr<Pass>> BuildPipeline(const CompileOptions& options);

}  // namespace foundry
