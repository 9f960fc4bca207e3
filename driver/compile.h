// Compile(const CompileRequest&): what foundry-compile does between parsing its options and
// printing and writing its results, as one library call, so that a Python binding or a launcher
// compiles exactly as the CLI does.
//
// Why a floor of its own (driver/, library foundry_driver, above passes/ and runtime/, below
// tools/): the plan is laid out for every backend this build has kernels for, and those
// backends' workspace figures are runtime/'s (CompiledBackendSpecs); passes/ sits beside
// runtime/ and must not reach into it. The run side's Train(RunRequest) belongs here too.
//
// The steps, in the order their errors are reported (each an error value; nothing here prints
// but to `log` and through `warn`, and nothing exits):
//   1. the import (Compile only: CompileImported takes a model ImportModel read);
//   2. the importer's warning through `warn` (a training compile only), then the checkpoint
//      targets matched against the model's modules;
//   3. when the caller will write files (`outputs`, `output_prefix`): the model file's second
//      look (its external data, its inputs' dimension names), and no output may be one of them;
//   4. the pass pipeline, its lines on `log` (after `log_header`), the IR on `dump` after
//      `dump_after`;
//   5. --memory-budget: the search from autodiff's output, the choice on `log`
//      (FormatBudgetChoice), then remat and the schedule on the chosen instances (their lines
//      on `log`), as --ckpt with the chosen targets would; the frontier's extra searches;
//   6. --ckpt with `ckpt_config`: the selection as llm-foundry config;
//   7. training only: the memory plan (every backend), the memory report (the cpu layout), with
//      checkpointing the plain plan beside it and the checkpoint report, the plan's metadata.
// Nothing is written: the caller writes the plan (WriteCompiledOutputs), the report files and
// the config from the result.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "compiler/ckpt_targets.h"
#include "compiler/ir.h"
#include "compiler/plan.h"
#include "passes/autocast.h"
#include "passes/ckpt_budget.h"
#include "passes/loss_backward.h"
#include "passes/memory_report.h"
#include "passes/memory_timeline.h"
#include "passes/shard.h"

namespace foundry {

// A file the caller will write, with the option that names it for messages ("--report-json
// FILE"): Compile refuses it when it is the model or one of its external data files.
struct OutputFile {
  std::string path;
  std::string option;
};

struct CompileRequest {
  std::string model;                    // the exported model (.onnx)
  std::map<std::string, int64_t> dims;  // --dim bindings
  int64_t fold_limit_bytes = int64_t{1} << 20;
  std::vector<std::string> freeze;         // globs over parameter names
  std::vector<std::string> trainable;      // globs over float initializer names
  bool training = true;                    // false: the forward graph only (fold, canonicalize)
  bool fuse_attention = true;              // --no-attention-fusion: attention as exported
  Precision precision = Precision::kFp32;  // --precision (passes/autocast.h)

  std::vector<CkptTarget> ckpt_targets;  // --ckpt and --ckpt-config, in that order
  // --memory-budget: the search chooses the targets (ckpt_targets must be empty);
  // `memory_budget_text` is the size as the user wrote it, for messages.
  std::optional<int64_t> memory_budget;
  std::string memory_budget_text;
  // --device-reserve: bytes per device the plan cannot see (the CUDA context, cuBLAS's and NCCL's
  // own buffers, the allocator's rounding), taken off memory_budget before the search plans
  // against it, so that an answer fits the card and not just the plan. Resolved by the caller.
  int64_t device_reserve = 0;
  bool frontier = false;     // with memory_budget: the --memory-frontier points too
  bool ckpt_config = false;  // with ckpt_targets: the selection as llm-foundry config too

  // -o PREFIX: the files WriteCompiledOutputs will write there are checked against the model's
  // own, and the plan names PREFIX.train.onnx as its graph; "" when nothing is written there
  // (--dry-run).
  std::string output_prefix;
  std::vector<OutputFile> outputs;  // every other file the caller will write

  std::string dump_after;  // a pass name: its output IR goes to `dump`
  std::ostream* dump = nullptr;
  std::ostream* log = nullptr;                   // progress lines, `log_header` first
  std::string log_header;                        // written to `log` when the passes start
  std::function<void(const std::string&)> warn;  // one line each, without a prefix
  // --grad-accum K: microbatches per optimizer step (passes/grad_accumulate.h); 1 = none, the
  // plan exactly as without the option.
  int64_t grad_accumulation = 1;
  // --world-size N --sharding S (--shard-group G for HYBRID_SHARD): the plan of one rank of N
  // (passes/shard.h); 1 = the plan exactly as without the options.
  int64_t world_size = 1;
  ShardingStrategy sharding = ShardingStrategy::kFullShard;
  int64_t shard_group = 8;
  // --fsdp-mixed-precision (or --config's fsdp_config.mixed_precision): FSDP's MixedPrecision
  // (compiler/sharding.h), resolved by the caller; FULL (all f32) is torch.autocast alone.
  FsdpMixedPrecision mixed_precision;
  // --autocast-weight-copies saved: under amp_bf16 with f32 parameters the backward reads the
  // forward's bf16 copy of each weight, as torch.autocast's cache and autograd hold it, instead
  // of casting again (passes/autocast.h). Resolved by the caller (saved for an FSDP run).
  bool save_autocast_weight_copies = false;
  // --loss-fn (or --config's model.loss_fn): the cross-entropy whose backward the plan holds
  // (passes/loss_backward.h); llm-foundry's default is fused_crossentropy.
  LossFn loss_fn = LossFn::kFusedCrossEntropy;
  // --ckpt-syntax: what --memory-budget may answer (passes/ckpt_budget.h's CkptSyntax).
  CkptSyntax ckpt_syntax = CkptSyntax::kLlmFoundry;
};

struct CompileResult {
  Graph graph;  // the training graph (scheduled; checkpointed when a selection applies) or the
                // forward graph
  std::optional<CompiledOutputs> outputs;  // the -o files, when output_prefix is set
  // Training only: the memory plan (a layout per backend) and what the plan file says besides
  // (graph_file with output_prefix only; input_dims only when step 3 read the model file again).
  std::optional<Plan> plan;
  // Training only: the cpu layout's report; report->checkpoint with checkpointing (and with a
  // budget, even when it chose nothing), report->budget with a budget.
  std::optional<MemoryReport> report;
  std::optional<TimelineCurve> plain_curve;   // with checkpointing: the plain plan's live bytes
  std::optional<CkptSelection> selection;     // the targets given or chosen, as matched
  std::optional<BudgetResult> budget_search;  // --memory-budget: every plan the search made
  std::optional<BudgetChoice> budget;         // --memory-budget: what it chose (as printed)
  std::optional<FrontierPoints> frontier;     // request.frontier
  // The chosen or given selection as llm-foundry config (memory_budget, or ckpt_config).
  std::optional<CkptConfigText> ckpt_config;
  // A sharded plan (world_size > 1, not NO_SHARD): the shard pass's statistics, and the full
  // initial values of the parameters that had data, for outputs->init (ShardingPlan::init_file).
  std::optional<ShardStats> shard;
  std::optional<CommVolume> comm;  // world_size > 1: what one rank moves per optimizer step
  // --memory-budget with --world-size N > 1: the fewest ranks (a power of two) at which the
  // smallest plan (every block checkpointed) fits the budget per rank, and that plan's total.
  struct WorldFit {
    int64_t world_size = 0;
    int64_t total_bytes = 0;
  };
  std::optional<WorldFit> smallest_world;
  std::map<std::string, std::shared_ptr<const Tensor>> shard_init;
};

// The importer with the request's dims.
StatusOr<Graph> ImportModel(const CompileRequest& request);

// Steps 2 onwards on a model ImportModel read.
StatusOr<CompileResult> CompileImported(const CompileRequest& request, Graph model);

// All of it.
StatusOr<CompileResult> Compile(const CompileRequest& request);

}  // namespace foundry
