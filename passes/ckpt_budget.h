// `--memory-budget` (issue 12): the cheapest checkpointing whose planned training step fits in a
// budget, found with the real planner, and said as llm-foundry config.
//
// Everything here starts from the training graph autodiff made (before remat and the schedule):
// one evaluation of a selection = copy that graph, RematPass on the selection, SchedulePass,
// PlanMemory, and read the planned total (memory_report.h's LayoutSummary::total_bytes: arena +
// parameters + gradients + optimizer state + feeds + constants + outputs) and the recompute
// FLOPs/nodes (the clones, NodeFlops).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/ckpt_targets.h"
#include "compiler/ir.h"
#include "passes/shard.h"

namespace foundry {

// One checkpointing selection and what the real planner says of it.
struct CkptEvaluation {
  std::vector<std::string> instances;  // module paths, none inside another, module-tree order
  int64_t total_bytes = 0;             // planned total of the step
  int64_t arena_bytes = 0;
  int64_t saved_bytes = 0;  // saved for backward
  int64_t flops_recomputed = 0;
  int64_t nodes_recomputed = 0;
  int64_t step_flops = 0;  // forward + backward + recompute of the step
  std::string label;  // for uniform llm-foundry targets: "grouped_query_attention=first-3"; else ""
};

// Plans already made for a model, by selection (ckpt_budget.cc): a second search on the same
// evaluator (the --memory-frontier budgets) reuses them.
struct CkptPlanCache;

// Plans selections of one model. Holds a copy of the autodiff output; thread-compatible.
class CkptEvaluator {
 public:
  // `autodiff_graph`: the pipeline's graph right after the autodiff pass.
  // `shard`: plan one rank of several (passes/shard.h) after remat and the recast, as the
  // pipeline does for foundry-compile --world-size; the default plans a single process.
  explicit CkptEvaluator(const Graph& autodiff_graph, ShardPass::Options shard = {});
  ~CkptEvaluator();
  StatusOr<CkptEvaluation> Evaluate(const std::vector<std::string>& instances) const;
  int evaluations() const { return evaluations_; }
  const Graph& graph() const { return graph_; }
  const ShardPass::Options& shard() const { return shard_; }
  CkptPlanCache& cache() const { return *cache_; }

 private:
  Graph graph_;
  ShardPass::Options shard_;
  mutable int evaluations_ = 0;
  std::unique_ptr<CkptPlanCache> cache_;
};

// The per-layer options of the search (issue 12, "Candidates"): for each block, the block itself,
// and every combination of its non-nested eligible children (attention, FFN, norms: the children
// that carry a registry key, or on an export without classes every child with forward nodes).
struct LayerOption {
  std::vector<std::string> children;  // child names relative to the block ("attn", "ffn"); empty
                                      // with whole_block false = nothing checkpointed
  bool whole_block = false;
};
struct BlockLayer {
  std::string block;                  // "transformer.blocks.3"
  int64_t layer = -1;                 // its index N
  std::vector<std::string> children;  // eligible children (names relative to the block)
};
std::vector<BlockLayer> CheckpointableLayers(const Graph& graph);

struct BudgetOptions {
  int64_t budget_bytes = 0;
  int max_plans = 400;  // real plans the search may make before it settles for the best so far
};

struct BudgetResult {
  CkptEvaluation chosen;
  std::vector<CkptEvaluation> uniform;  // every llm-foundry uniform target evaluated (with first-n)
  std::vector<CkptEvaluation> searched;  // every other selection planned, in the order planned
  int plans = 0;                         // real plans made in all
};

// The cheapest fitting selection: fewest recompute FLOPs, then fewest recompute nodes, then
// earlier layers left un-checkpointed. Errors: a budget below the smallest plan (searched for on
// its own when nothing fits, independent of the budget, so a budget of the stated figure
// compiles): the message says its total, its selection, its largest memory class (arena,
// optimizer state, gradients, parameters, inputs, constants, outputs) with the others, and what
// lowers that class (--dim batch/seq, --freeze, foundry-run --optimizer sgd).
StatusOr<BudgetResult> ChooseCheckpointing(const CkptEvaluator& evaluator,
                                           const BudgetOptions& options);

// "20GiB", "20 GiB", "1.5GB", "512MiB", "123456789" (bytes): powers of 1024 for KiB/MiB/GiB/TiB,
// of 1000 for KB/MB/GB/TB, units in any case. Decimals are read exactly, with any number of
// digits, and round down to whole bytes. Errors (one line: the text quoted, escaped and cut at
// 200 characters, the reason, the accepted forms): a size that rounds to 0 ("it is below one
// byte"), 0, past int64 ("too large"), a sign, "1." and ".5", a fraction of plain bytes, an
// unknown unit (1e3GiB, 0x10, nanGiB reach it or "does not start with a number").
StatusOr<int64_t> ParseByteSize(const std::string& text);

// The selection as llm-foundry's activation_checkpointing_target dict, as compact as its layer
// syntax allows ({mptblock: first-3, grouped_query_attention: range-3-23}), one YAML line, which
// --ckpt-config reads back to the same instances. `warnings`: one line each where upstream
// llm-foundry would reject it (FFN names, several names at once, foundry-only names such as child
// names or globs).
// One layer item of a dict value: "first-3", "last-2", "range-3-23", or a bare layer index.
struct CkptLayerItem {
  std::string text;    // as the YAML writes it
  int64_t index = -1;  // >= 0: a bare layer index (`text` is its digits)
};
// One name of the dict with its layers as llm-foundry reads them: one string (the items joined
// with commas: "first-2,last-1") or, when a bare index is among them, a list of the items.
struct CkptConfigEntry {
  std::string name;
  std::vector<CkptLayerItem> items;
  bool list = false;
};
struct CkptConfigText {
  std::string yaml;  // "{mptblock: first-3, grouped_query_attention: range-3-23}"
  std::vector<CkptConfigEntry> entries;  // the same dict, as data
  std::vector<CkptTarget> targets;       // the same, as targets
  std::vector<std::string> warnings;
};
StatusOr<CkptConfigText> SelectionAsConfig(const Graph& graph,
                                           const std::vector<std::string>& instances);

// The --emit-ckpt-config file: `comment` as its first line, then the two keys of an llm-foundry
// training config that switch the selection on (or off, when `config` selects nothing), which
// --ckpt-config reads back.
std::string CkptConfigFile(const std::string& comment, const CkptConfigText& config);

// What a --memory-budget search chose, and what it is measured against: foundry-compile prints
// it (FormatBudgetChoice) and --report-json writes it as its "budget" object.
struct BudgetChoice {
  int64_t budget_bytes = 0;
  CkptEvaluation chosen;  // BudgetResult::chosen
  CkptConfigText config;  // chosen.instances as llm-foundry config; yaml "" when none
  // The cheapest llm-foundry uniform target whose plan fits (fewest recompute FLOPs, then
  // nodes; the first of equals in BudgetResult::uniform order); none when none fits.
  std::optional<CkptEvaluation> uniform;
  int plans = 0;  // BudgetResult::plans
};
// `result` of a search for `budget_bytes` over `autodiff_graph` (the evaluator's graph).
StatusOr<BudgetChoice> MakeBudgetChoice(const Graph& autodiff_graph, const BudgetResult& result,
                                        int64_t budget_bytes);

// flops_recomputed / step_flops · 100 (0 for an empty step).
double RecomputePercent(const CkptEvaluation& evaluation);

// "planned total 1.4 MiB (1469915 B) <= budget 1.4 MiB (1500000 B), recompute 3.41 % of the
// step; 34 plans evaluated": the line foundry-compile prints and heads the emitted config with.
std::string BudgetLine(const BudgetChoice& choice);

// The lines foundry-compile prints for the choice: "memory budget: " + BudgetLine, the target
// (or that nothing is needed), the config's warnings as notes, the cheapest uniform target.
std::string FormatBudgetChoice(const BudgetChoice& choice);

// The Pareto frontier picture (`--memory-frontier FILE.svg`): planned total (x) against recompute
// FLOPs as % of the step (y), the chosen selections over a range of budgets as a step line with
// points, and llm-foundry's uniform targets (none, attention, FFN, attention + FFN, block) as
// labelled points. Hand-written SVG like passes/memory_timeline.cc.
struct FrontierPoint {
  int64_t total_bytes = 0;
  double recompute_percent = 0;
  std::string label;  // uniform targets: "grouped_query_attention"; frontier points: ""
};
std::string MemoryFrontierSvg(const std::string& title, const std::vector<FrontierPoint>& frontier,
                              const std::vector<FrontierPoint>& uniform);

// The points --memory-frontier draws, from a first search `first` on `evaluator`: the cheapest
// plan for 13 budgets spread evenly from the smallest uniform total (every block) to the largest
// (nothing checkpointed), Pareto-filtered, and llm-foundry's uniform targets on every layer (the
// ones without a layer spec). The extra searches reuse the evaluator's plans.
struct FrontierPoints {
  std::vector<FrontierPoint> frontier;
  std::vector<FrontierPoint> uniform;
};
StatusOr<FrontierPoints> MemoryFrontier(const CkptEvaluator& evaluator, const BudgetResult& first);

}  // namespace foundry
