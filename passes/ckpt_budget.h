// `--memory-budget`: the cheapest checkpointing whose planned training step fits in a
// budget, found with the real planner, and said as llm-foundry config.
//
// Everything here starts from the training graph autodiff made (before remat and the schedule):
// one evaluation of a selection = copy that graph, run the post-autodiff passes on the selection
// (passes/pipeline.h: remat, recast, shard, schedule), PlanMemory, and read the planned total
// (memory_report.h's LayoutSummary::total_bytes: arena + parameters + gradients + optimizer state
// + feeds + constants + outputs) and the recompute FLOPs/nodes (the clones, NodeFlops).
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
#include "passes/autocast.h"
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
  // `autodiff_graph`: the pipeline's graph right after the autodiff pass (and grad_accumulate).
  // `precision` and `shard`: the post-autodiff passes' options besides the selection
  // (passes/pipeline.h), as the compile gives them: amp_bf16 repeats the backward's weight
  // casts; above 1 rank each plan is one rank's (foundry-compile --world-size).
  // `recast`: how the backward gets its bf16 weight copies under amp_bf16.
  explicit CkptEvaluator(const Graph& autodiff_graph, Precision precision = Precision::kFp32,
                         ShardPass::Options shard = {}, AutocastRecastPass::Options recast = {});
  ~CkptEvaluator();
  StatusOr<CkptEvaluation> Evaluate(const std::vector<std::string>& instances) const;
  int evaluations() const { return evaluations_; }
  const Graph& graph() const { return graph_; }
  Precision precision() const { return precision_; }
  const ShardPass::Options& shard() const { return shard_; }
  const AutocastRecastPass::Options& recast() const { return recast_; }
  CkptPlanCache& cache() const { return *cache_; }
  // One graph run per step (no foundry::AccumulateGradient): gradients planned in the arena.
  bool gradients_in_arena() const { return gradients_in_arena_; }

 private:
  Graph graph_;
  bool gradients_in_arena_ = true;
  Precision precision_;
  ShardPass::Options shard_;
  AutocastRecastPass::Options recast_;
  mutable int evaluations_ = 0;
  std::unique_ptr<CkptPlanCache> cache_;
};

// The per-layer options of the search: for each block, the block itself,
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

// Which answers the search may give (foundry-compile --ckpt-syntax).
//   kLlmFoundry: only configs upstream llm-foundry accepts (llmfoundry/models/utils/act_ckpt.py,
//     models/mpt/modeling_mpt.py's activation_checkpointing_fn, models/hf/hf_fsdp.py):
//     - an MPT model (blocks of class MPTBlock): the dict form {name: layers}, at most one name
//       per block (check_mapping_blocks_overlap), names get_act_ckpt_module resolves to a class:
//       mptblock, the attention keys (grouped_query_attention, multihead_attention,
//       multiquery_attention), norm_attn_norm and the norm keys (layernorm, rmsnorm,
//       low_precision_layernorm, low_precision_rmsnorm, triton_rmsnorm); never an FFN key
//       (mptmlp, mptglu, te_ln_mlp, torch_dmoe, mb_moe, mb_dmoe: upstream registers builder
//       functions, and isinstance(module, function) raises TypeError);
//     - any other model (Hugging Face-style, or an export without classes): every block or
//       nothing (hf_fsdp.py checkpoints every decoder block when
//       fsdp_config.activation_checkpointing is true and reads no target).
//   kFoundry: any selection --ckpt-config reads (several names per block, FFN keys, child names,
//     globs); the notes say where upstream would refuse it.
enum class CkptSyntax { kLlmFoundry, kFoundry };
// "llm-foundry" / "foundry"; anything else is an error naming both.
StatusOr<CkptSyntax> ParseCkptSyntax(const std::string& text);
const char* CkptSyntaxName(CkptSyntax syntax);

struct BudgetOptions {
  int64_t budget_bytes = 0;
  int max_plans = 400;  // real plans the search may make before it settles for the best so far
  CkptSyntax syntax = CkptSyntax::kLlmFoundry;
};

// The search's order on fitting selections, best first: fewer recompute FLOPs, then fewer
// recompute nodes; ties go to fewer instances, then the smaller planned total, then the
// selection checkpointing earlier layers (per layer in order, checkpointed before not: first-k
// before last-k, llm-foundry's own `n` = first n), then the instance paths. So an instance that
// recomputes nothing and frees nothing never pads an answer, and first-k beats last-k at equal
// recompute only when its plan is no larger.
bool CkptPreferred(const CkptEvaluation& a, const CkptEvaluation& b,
                   const std::vector<std::string>& blocks);

struct BudgetResult {
  CkptEvaluation chosen;
  std::vector<CkptEvaluation> uniform;  // every llm-foundry uniform target evaluated (with first-n)
  std::vector<CkptEvaluation> searched;  // every other selection planned, in the order planned
  int plans = 0;                         // real plans made in all
};

// The best fitting selection in CkptPreferred's order among the selections options.syntax
// allows; then every name (unit of the per-layer options, or the block) of it whose removal from
// every layer it is on plans no larger a total is removed (options that free nothing are never
// part of an answer). Errors: a budget below the smallest plan (searched for on
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
  std::string yaml;  // "{mptblock: first-3, grouped_query_attention: range-3-23}"; "" with
                     // every_block_by_flag or when nothing is checkpointed
  std::vector<CkptConfigEntry> entries;  // the same dict, as data
  std::vector<CkptTarget> targets;       // the same, as targets
  std::vector<std::string> warnings;
  // Said by fsdp_config.activation_checkpointing: true alone, no target (a non-MPT model under
  // CkptSyntax::kLlmFoundry: every block); `targets` is then {block}.
  bool every_block_by_flag = false;
  // What the reader must know beside the warnings (what the syntax restricted, where the keys
  // go); foundry-compile prints them and the emitted file carries them as comments.
  std::vector<std::string> notes;
  bool empty() const { return targets.empty(); }  // nothing checkpointed
};
// Under CkptSyntax::kLlmFoundry a selection upstream cannot say is an error (one line, naming
// --ckpt-syntax foundry); under kFoundry every selection is said, with warnings.
StatusOr<CkptConfigText> SelectionAsConfig(const Graph& graph,
                                           const std::vector<std::string>& instances,
                                           CkptSyntax syntax = CkptSyntax::kFoundry);

// The per-layer units kLlmFoundry's search may checkpoint on an MPT model, besides the whole
// block: each upstream name (mptblock aside) that selects the same non-empty set of modules in
// every block, with those modules relative to the block ({"attn"}, {"norm_1", "norm_2"});
// names selecting the same set as an earlier one are left out. Empty for a model that is not
// MPT (its blocks are checkpointed all or none).
struct UpstreamUnit {
  std::string name;                   // "grouped_query_attention"
  std::vector<std::string> children;  // relative to the block
};
bool IsMptModel(const Graph& graph);
std::vector<UpstreamUnit> UpstreamUnits(const Graph& graph);
// The name upstream resolves to a class for activation_checkpointing_target (act_ckpt.py's
// get_act_ckpt_module, then isinstance): mptblock, attention, norm_attn_norm and norm keys.
bool IsUpstreamClassKey(const std::string& lowercase_name);

// The direct child of `block` that holds the attention: the one whose forward nodes compute it
// (the fused foundry::Attention op, or a Softmax fed by a MatMul of two activations: QK^T);
// "" when none does. Never a norm named after the attention (post_attention_layernorm).
std::string AttentionChild(const Graph& graph, const std::string& block);

// The --emit-ckpt-config file: `comment` as its first line, then every warning and note of
// `config` as a comment line ("# note: ..."), then the two keys of an llm-foundry training config
// that switch the selection on (or off, when `config` selects nothing; the flag alone with
// every_block_by_flag), which --ckpt-config reads back.
std::string CkptConfigFile(const std::string& comment, const CkptConfigText& config);

// What a --memory-budget search chose, and what it is measured against: foundry-compile prints
// it (FormatBudgetChoice) and --report-json writes it as its "budget" object.
struct BudgetChoice {
  int64_t budget_bytes = 0;
  int64_t reserve_bytes = 0;  // the device reserve the plans were held under (budget less it)
  CkptEvaluation chosen;      // BudgetResult::chosen
  CkptConfigText config;      // chosen.instances as llm-foundry config; yaml "" when none
  // The cheapest llm-foundry uniform target whose plan fits (CkptPreferred's order); none when
  // none fits.
  std::optional<CkptEvaluation> uniform;
  int plans = 0;                                // BudgetResult::plans
  CkptSyntax syntax = CkptSyntax::kLlmFoundry;  // what the search was held to
};
// `result` of a search for `budget_bytes` less `reserve_bytes` over `autodiff_graph` (the
// evaluator's graph).
StatusOr<BudgetChoice> MakeBudgetChoice(const Graph& autodiff_graph, const BudgetResult& result,
                                        int64_t budget_bytes,
                                        CkptSyntax syntax = CkptSyntax::kLlmFoundry,
                                        int64_t reserve_bytes = 0);

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
// `syntax`: the first search's (BudgetOptions::syntax).
StatusOr<FrontierPoints> MemoryFrontier(const CkptEvaluator& evaluator, const BudgetResult& first,
                                        CkptSyntax syntax = CkptSyntax::kLlmFoundry);

}  // namespace foundry
